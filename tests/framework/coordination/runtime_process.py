"""A stand-in runtime for the chaos tests: a Coordinator in its own process.

``python runtime_process.py HOSTS CLUSTER RUNTIME_ID SESSION_TIMEOUT`` commits an
ever-growing position for every source it works on, every 100 ms, and prints
one JSON line per round: ``{"started": wall time of the round, "owned": {...},
"outcomes": {source: ["committed" | "held" | "fenced", epoch, began, ended]}}``, the
last two the wall times the commit was asked and answered. Like a runtime with a
batch in flight, it keeps committing for sources it worked on until a commit is
fenced. The coordinator's log goes to stderr.
"""

from __future__ import annotations

import json
import logging
import sys
import time

from dbus_fn.coordination import Coordinator
from dbus_fn.errors import FencedError
from dbus_fn.events import BinlogPosition


def main() -> None:
    hosts, cluster, runtime_id, session_timeout = sys.argv[1:5]
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(created).3f %(message)s")
    coordinator = Coordinator(
        hosts, cluster, runtime_id, session_timeout=float(session_timeout)
    ).start()
    working: dict[str, int] = {}
    counter = 0
    while True:
        started = time.time()
        owned = coordinator.owned_sources()
        working.update(owned)
        outcomes: dict[str, tuple[str, int, float, float]] = {}
        for source, epoch in sorted(working.items()):
            counter += 1
            began = time.time()
            try:
                outcome = coordinator.commit_position(
                    source, BinlogPosition(f"{runtime_id}.000001", counter), epoch
                )
            except FencedError:
                outcome = "fenced"
                del working[source]
            outcomes[source] = (outcome, epoch, began, time.time())
        line = {"started": started, "owned": owned, "outcomes": outcomes}
        print(json.dumps(line), flush=True)
        time.sleep(0.1)


if __name__ == "__main__":
    main()
