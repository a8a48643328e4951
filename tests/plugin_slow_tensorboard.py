"""A real TensorBoard whose Bottleneck plugin analyses one run slowly: for the browser
test of the tab's "analysing" state. Run by ``plugin_helpers.TensorBoard(launcher=...)``
with TensorBoard's own arguments; the slow run is ``$TFBNECK_TEST_SLOW_RUN``, analysed
in ``$TFBNECK_TEST_SLOW_S`` seconds (default 6). Every report request answers 202 at once
(``REPORT_WAIT_S = 0``), so the frontend's polling is exercised on every session."""
import os
import sys
import time

from tensorboard import default, program
from tensorboard.plugins import base_plugin

from tfbneck_plugin.plugin import routes as plugin_mod
from tfbneck_plugin.analysis.session import analyze_session

SLOW_RUN = os.environ.get("TFBNECK_TEST_SLOW_RUN", "")
SLOW_S = float(os.environ.get("TFBNECK_TEST_SLOW_S", "6"))
plugin_mod.REPORT_WAIT_S = 0.0


def analyze(session):
    if session.run == SLOW_RUN:
        time.sleep(SLOW_S)
    return analyze_session(session)


class SlowLoader(base_plugin.TBLoader):
    def load(self, context):
        return plugin_mod.BottleneckPlugin(context, analyze=analyze)


def main():
    plugins = [p for p in default.get_plugins()
               if not (p is plugin_mod.BottleneckPluginLoader or isinstance(p, plugin_mod.BottleneckPluginLoader))]
    tb = program.TensorBoard(plugins=plugins + [SlowLoader()])
    tb.configure(argv=[sys.argv[0]] + sys.argv[1:])
    sys.exit(tb.main())


if __name__ == "__main__":
    main()
