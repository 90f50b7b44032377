"""Comparing run folders: loading and labels, comparability, differences and the gate, pages."""
