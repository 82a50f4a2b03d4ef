"""The composition root: the `finserve` command, the app that mounts gateway and jobs routes, process wiring."""
