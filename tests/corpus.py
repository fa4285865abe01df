"""A corpus of credential shapes for redaction: each positive is a line as
users' code, config, logs and tools write it, with the secret that must not
survive anywhere; each negative must be kept byte for byte (hashes, UUIDs,
task keys, addresses). Shapes read from public secret-scanning rule sets
(gitleaks, detect-secrets) and from the leaks issue 67 reproduced. Imports
nothing: a worker imports it to log the lines."""

from __future__ import annotations

#: (line, the secret in it). Secrets are distinct, so a leak names its shape.
POSITIVES: list[tuple[str, str]] = [
    # key=value in the languages of config and code
    ("password=hunter2xx1", "hunter2xx1"),
    ("DB_PASSWORD = 'pw-db-77a1'", "pw-db-77a1"),
    ('export PGPASSWORD="pg-x91k2"', "pg-x91k2"),
    ("db.password=jprops-55aa", "jprops-55aa"),
    ("password: yaml-pw-0b1c", "yaml-pw-0b1c"),
    ('password = "toml-pw-7e21"', "toml-pw-7e21"),
    ('{"password": "json-pw-11f0"}', "json-pw-11f0"),
    ("{'Password': 'dictpw-3a9d'}", "dictpw-3a9d"),
    ("'password' => 'phppw-2c4e'", "phppw-2c4e"),
    ("pass := goPass-81b2 // go", "goPass-81b2"),
    ("connect(user='u', password='kwpw-9d8c')", "kwpw-9d8c"),
    ("dbPassword=camel-pw-44e1", "camel-pw-44e1"),
    ("DB_PWD=pwd-val-6621", "pwd-val-6621"),
    ("passwd: passwd-0f0f", "passwd-0f0f"),
    ("passphrase='phrase-ab12'", "phrase-ab12"),
    ("api_key=apikey-val-123", "apikey-val-123"),
    ("apiKey: camel-api-5551", "camel-api-5551"),
    ("X-API-KEY: header-api-778", "header-api-778"),
    ("access_token=at-val-0a0b", "at-val-0a0b"),
    ("accessToken: camel-at-9911", "camel-at-9911"),
    ("refresh_token='rt-val-4c4c'", "rt-val-4c4c"),
    ("client_secret=cs-val-8e8e", "cs-val-8e8e"),
    ("clientSecret: cs-camel-2d2d", "cs-camel-2d2d"),
    (
        "aws_secret_access_key=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
        "wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    ),
    (
        "aws_session_token=FwoGZXIvYXdzEXAMPLETOKENvalue",
        "FwoGZXIvYXdzEXAMPLETOKENvalue",
    ),
    ("private_key: pk-val-3131", "pk-val-3131"),
    ("SECRET_KEY = 'django-insecure-x1y2z3'", "django-insecure-x1y2z3"),
    ('SECRET_KEY = b"bytes-secret-6b6b"', "bytes-secret-6b6b"),
    ("SECRET_KEY = r'raw-secret-7c7c'", "raw-secret-7c7c"),
    ('SECRET = f"fstr-secret-1e1e"', "fstr-secret-1e1e"),
    ('TOKEN = """triple-tok-2f2f"""', "triple-tok-2f2f"),
    (
        'API_TOKEN = (\n    "wrapped-part-one"\n    "wrapped-part-two"\n)',
        "wrapped-part-one",
    ),
    (
        'API_TOKEN = (\n    "wrapped-part-one"\n    "wrapped-part-two"\n)',
        "wrapped-part-two",
    ),
    ('passwords = ["listpw-aa01", "listpw-bb02"]', "listpw-bb02"),
    ("credentials = {'user': 'bob', 'pw': 'dictcred-5d5d'}", "dictcred-5d5d"),
    ("auth: auth-val-6e6e", "auth-val-6e6e"),
    ("gateway.auth.kwargs.password: gw-pass-9c9c", "gw-pass-9c9c"),
    ("coiled.token: coiled-tok-1a2b", "coiled-tok-1a2b"),
    ("password=basic-looks-like-a-scheme", "basic-looks-like-a-scheme"),
    ("<password>xml-pw-4b4b</password>", "xml-pw-4b4b"),
    ("<db:Password>xmlns-pw-8f8f</db:Password>", "xmlns-pw-8f8f"),
    ("session_id=sess-val-3e3e", "sess-val-3e3e"),
    ("signing_key: sign-key-7a7a", "sign-key-7a7a"),
    ("encryption_key=enc-key-0c0c", "enc-key-0c0c"),
    ("master_key: mk-val-5f5f", "mk-val-5f5f"),
    # connection strings
    (
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=azKEYabc123+/==;EndpointSuffix=core.windows.net",
        "azKEYabc123+/==",
    ),
    ("{'AccountKey': 'azdict-key-0101'}", "azdict-key-0101"),
    ("account_key='az-under-key-0202'", "az-under-key-0202"),
    ("connection_string='Server=x;Password=connpw-0303'", "connpw-0303"),
    ("connection_string: InstrumentationKey=ik-0404", "InstrumentationKey=ik-0404"),
    (
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey=sbkey-0505=",
        "sbkey-0505=",
    ),
    ("Server=tcp:x.database.windows.net;User ID=u;Password=sqlpw-0606;", "sqlpw-0606"),
    # URLs
    ("postgresql://scott:tiger-0707@db:5432/prod", "tiger-0707"),
    ("redis://:redispw-0808@cache:6379/0", "redispw-0808"),
    ("mongodb+srv://app:mongopw-0909@cluster0.example.net/db", "mongopw-0909"),
    ("amqp://guest:amqppw-1010@rabbit:5672/", "amqppw-1010"),
    (
        "https://oauth2tokenuserinfo1111@git.example.com/repo.git",
        "oauth2tokenuserinfo1111",
    ),
    (
        "https://acct.blob.core.windows.net/c/f?sv=2022-11-02&ss=b&sig=sasSIG1212%2Babc%3D",
        "sasSIG1212%2Babc%3D",
    ),
    (
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKCRED1313&X-Amz-Signature=sig1414abcdef",
        "sig1414abcdef",
    ),
    (
        "https://b.s3.amazonaws.com/k?X-Amz-Security-Token=sectok1515xyz&x=1",
        "sectok1515xyz",
    ),
    ("https://storage.googleapis.com/b/o?X-Goog-Signature=goog1616sig", "goog1616sig"),
    ("https://api.example.com/v1?access_token=qat-1717-xyz", "qat-1717-xyz"),
    # headers
    ("Authorization: Bearer abc.def-ghi_1818", "abc.def-ghi_1818"),
    ("{'Authorization': 'Basic dXNlcjpwYXNzMTkxOQ=='}", "dXNlcjpwYXNzMTkxOQ=="),
    ("Authorization: token gh-plain-2020", "gh-plain-2020"),
    ("Cookie: sessionid=cookie-2121; csrftoken=csrf-2222", "cookie-2121"),
    ("Cookie: sessionid=cookie-2121; csrftoken=csrf-2222", "csrf-2222"),
    ("Set-Cookie: auth=setck-2323; Path=/; HttpOnly", "setck-2323"),
    ("requests.get(url, headers={'Cookie': 'jar-2424'})", "jar-2424"),
    # command lines
    ("psql --password psqlpw-2525 -h db", "psqlpw-2525"),
    ("mysql --password=mypw-2626 -u root", "mypw-2626"),
    ("openssl enc -pass pass:osslpw-2727 -in f", "pass:osslpw-2727"),
    ("cli login --token clitok-2828", "clitok-2828"),
    ("tool --api-key cliapi-2929 run", "cliapi-2929"),
    ('docker login -u me --password "dockpw-3030"', "dockpw-3030"),
    # vendor tokens
    ("key id AKIAIOSFODNN7EXAMPL3 used", "AKIAIOSFODNN7EXAMPL3"),
    ("ASIAY34FZKBOKMUTVV7A session", "ASIAY34FZKBOKMUTVV7A"),
    (
        "ghp_0123456789abcdefghijABCDEFGHIJ012345 leaked",
        "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    ),
    (
        "gho_16C7e42F292c6912E7710c838347Ae178B4a",
        "gho_16C7e42F292c6912E7710c838347Ae178B4a",
    ),
    (
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
    ),
    ("glpat-abcdefghij0123456789", "glpat-abcdefghij0123456789"),
    ("xoxb-1234567890-abcdefghij", "xoxb-1234567890-abcdefghij"),
    ("xapp-1-A0123456789-0123456789-abcdef", "xapp-1-A0123456789-0123456789-abcdef"),
    ("https://hooks.slack.com/services/T0000/B0000/XXXXslackhook", "XXXXslackhook"),
    ("https://discord.com/api/webhooks/123456/discordHOOKtoken", "discordHOOKtoken"),
    ("jwt eyJhbGciOiJIUzI1.eyJzdWIiOiIxMjM0.SflKxwRJSMeKKF2QT4", "SflKxwRJSMeKKF2QT4"),
    ("hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"),
    (
        "OPENAI sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34 used",
        "sk-proj-Ab12Cd34Ef56Gh78Ij90Kl12Mn34",
    ),
    ("sk-ant-api03-Zy98Xw76Vu54Ts32Rq10Po98", "sk-ant-api03-Zy98Xw76Vu54Ts32Rq10Po98"),
    (
        "sk-abcdefghij0123456789T3BlbkFJabcdefghij0123456789",
        "sk-abcdefghij0123456789T3BlbkFJabcdefghij0123456789",
    ),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc"),
    ("rk_test_51Habcdefghijklmnop", "rk_test_51Habcdefghijklmnop"),
    (
        "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
        "AIzaSyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    ),
    ("ya29.a0AfH6SMBexampleGoogleOAuthToken", "ya29.a0AfH6SMBexampleGoogleOAuthToken"),
    (
        "npm_abcdefghijklmnopqrstuvwxyz0123456789",
        "npm_abcdefghijklmnopqrstuvwxyz0123456789",
    ),
    (
        "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAxMjM0NTY3",
        "pypi-AgEIcHlwaS5vcmcCJGFiY2RlZmdoLWlqa2wtbW5vcC1xcnN0LXV2d3h5ejAxMjM0NTY3",
    ),
    (
        "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
        "SG.abcdefghijklmnopqrstuv.abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG",
    ),
    ("dop_v1_" + "a1" * 32, "dop_v1_" + "a1" * 32),
    ("dapi0123456789abcdef0123456789abcdef", "dapi0123456789abcdef0123456789abcdef"),
    (
        "shpat_0123456789abcdef0123456789abcdef",
        "shpat_0123456789abcdef0123456789abcdef",
    ),
    ("ATATT3xFfGF0" + "Ab1-" * 15, "ATATT3xFfGF0" + "Ab1-" * 15),
    (
        "AGE-SECRET-KEY-1"
        + "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7LQPZRY9X8GF2TVDW0S3JN54KHCE",
        "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L",
    ),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEpemblock\n"
        "-----END RSA PRIVATE KEY----- ok",
        "MIIEpemblock",
    ),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAA cut",
        "b3BlbnNzaC1rZXktdjEAAAA",
    ),
]

#: Lines with no secret, kept byte for byte.
NEGATIVES: list[str] = [
    "Worker tcp://127.0.0.1:40000 exceeded 95% memory budget. Restarting...",
    "Event loop was unresponsive in Worker for 3.02s.",
    "Compute Failed Key: ('inc-9f2c', 3) Function: inc args: (3,)",
    "tokenize.ensure-deterministic: False; password_file=/etc/pw; author: me",
    "Lost connection to 'tcp://[::1]:8786' while sending result for task",
    "naïve ☃ line\twith tab and ünïcode: 100 % done",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "md5 d41d8cd98f00b204e9800998ecf8427e",
    "run 550e8400-e29b-41d4-a716-446655440000 started",
    "('random_sample-8f1e2c3d4b5a69788796a5b4c3d2e1f0', 3, 1)",
    "('tokenize-abc123', 0) finished",
    "('read-parquet-task-7f6e', 12)",
    "('mask-disk-write-0a1b', 2) spilled 12.0 MiB",
    "PWD=/home/user/project",
    "git@github.com:dask/distributed.git",
    "ssh://git@example.com/repo.git",
    "user@example.com wrote the report",
    "https://docs.dask.org/en/stable/?highlight=spill#memory",
    "key=('sum-aggregate-3f', 0) nbytes=8",
    "Password policy: at least 12 characters",
    "no credentials were given; using the instance role",
    "author=bob sig-figs=3 design: ok",
    "Task ('msg-parse-1', 0) done; msg.count=4",
    "GET /api/v1/runs?limit=20&offset=40",
    "tcp://10.0.0.5:8786 <-> tcp://10.0.0.6:40001",
    "dashboard at http://127.0.0.1:8787/status",
    "elapsed 0:00:03.27 for 10,000 tasks",
    "coordinate (3, 4) at lat: 51.5, lon: -0.12",
    "the token bucket refilled",
    "auth succeeded for user bob",
]
