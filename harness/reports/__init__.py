"""Pages and text rendered from run folders: the run report, the console tables, compare."""
