"""Harness shared by tests/ and bench/ (bench never imports tests): emulators and real processes."""
