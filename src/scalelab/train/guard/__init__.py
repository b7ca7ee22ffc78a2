"""Keeping a run alive and recorded, behind one object (run_guard.RunGuard): README.md beside this file."""
