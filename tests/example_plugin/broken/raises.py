"""A plugin module whose own code raises on import."""

raise RuntimeError("MY_DATA_HOME is not set: the plugin's datasets live there")
