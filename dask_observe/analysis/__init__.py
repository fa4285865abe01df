"""What is made of recorded runs beyond the store's rows and below the flags:
headline figures (:mod:`.figures`), noise between repeat runs (:mod:`.noise`),
comparisons and histories (:mod:`.compare`), profile changes
(:mod:`.profiles`) and environment changes (:mod:`.changes`)."""
