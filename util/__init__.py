"""Generic helpers with no project imports, used from the engine up: an exclusive file lock (util/filelock.py)
and a JSON value's nesting depth measured without recursion (util/jsondepth.py)."""
