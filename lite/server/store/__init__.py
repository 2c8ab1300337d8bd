"""lite."""
