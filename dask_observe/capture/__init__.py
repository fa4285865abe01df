"""Plugins that run inside the cluster's own processes.

Nothing here may block: hooks append or count, and the recorder pulls.
"""
