"""The seams as mu sees them: hosts, links (and later jobs and channels),
each on top of the effects engine and the plugin runtime."""
