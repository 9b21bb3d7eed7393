"""Helpers the tests share (what a run leaves behind, written without running one)."""
