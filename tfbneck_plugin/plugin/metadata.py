"""Names shared by the TensorBoard plugin, its frontend and its tests (one place, as in
TensorBoard's own plugins)."""

#: The plugin's name: its routes live under ``/data/plugin/bottleneck/``.
PLUGIN_NAME = "bottleneck"
#: The tab's label in TensorBoard.
TAB_NAME = "Bottleneck"
#: The Profile plugin (xprof) whose Trace Viewer the tab links to.
PROFILE_PLUGIN_NAME = "profile"
