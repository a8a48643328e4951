"""A real TensorBoard whose Bottleneck plugin holds back one run's analysis: for the browser
test of the tab's "analysing" state. Run by ``plugin_helpers.TensorBoard(launcher=...)``
with TensorBoard's own arguments. The held run is ``$TFBNECK_TEST_SLOW_RUN``; its analysis
starts once the file ``$TFBNECK_TEST_RELEASE_FILE`` exists (at the latest after
``$TFBNECK_TEST_SLOW_S`` seconds, default 120), so the test decides when it ends instead of
guessing how long a loaded machine takes. Every report request answers 202 at once
(``report_wait_s=0``), so the frontend's polling is exercised on every session."""
import os
import sys
import time

from tensorboard import default, program
from tensorboard.plugins import base_plugin

from tfbneck_plugin.analysis.session import analyze_session
from tfbneck_plugin.plugin import BottleneckPlugin, BottleneckPluginLoader

SLOW_RUN = os.environ.get("TFBNECK_TEST_SLOW_RUN", "")
RELEASE_FILE = os.environ.get("TFBNECK_TEST_RELEASE_FILE", "")
SLOW_S = float(os.environ.get("TFBNECK_TEST_SLOW_S", "120"))


def analyze(session):
    if session.run == SLOW_RUN:
        deadline = time.monotonic() + SLOW_S
        while not (RELEASE_FILE and os.path.exists(RELEASE_FILE)) and time.monotonic() < deadline:
            time.sleep(0.05)
    return analyze_session(session)


class SlowLoader(base_plugin.TBLoader):
    def load(self, context):
        return BottleneckPlugin(context, analyze=analyze, report_wait_s=0.0)


def main():
    plugins = [p for p in default.get_plugins()
               if not (p is BottleneckPluginLoader or isinstance(p, BottleneckPluginLoader))]
    tb = program.TensorBoard(plugins=plugins + [SlowLoader()])
    tb.configure(argv=[sys.argv[0]] + sys.argv[1:])
    sys.exit(tb.main())


if __name__ == "__main__":
    main()
