"""The TensorBoard tab "Bottleneck" (entry point ``tfbneck_plugin.plugin:BottleneckPluginLoader``)."""
from .routes import BottleneckPlugin, BottleneckPluginLoader, RouteError, parse_query

__all__ = ["BottleneckPlugin", "BottleneckPluginLoader", "RouteError", "parse_query"]
