"""The live feed of a run, and watching one (``ors_lab.feed``; ``docs/feed.md`` is the wire format).

``Feed`` serves a run's events on 127.0.0.1 as Server-Sent Events (``evaluate(..., feed=PORT)``
makes one); ``FeedReader`` reads one. Watching a feed is drawn by the layers above: ``watch(url)``
shows the dashboard of the run behind a feed, in a notebook or as a line (``ors_lab.notebook.watch``);
``serve_watch(url)`` serves it as a page (``ors-lab watch URL``, ``ors_lab.viewer.watch``). Both
rebuild the run's dashboard state (``FeedState``, ``ors_lab.viewer.feed_state``) from the feed's
events. Their old names here still work, as deprecated aliases.
"""

import importlib
import warnings
from typing import TYPE_CHECKING, Any

from ors_lab.lazy import lazy as _lazy

if TYPE_CHECKING:
    from ors_lab.feed.reader import FeedReader, feed_url
    from ors_lab.feed.server import FEED_KINDS, Feed

__all__ = [
    "FEED_KINDS",
    "Feed",
    "FeedReader",
    "feed_url",
]

_ABOVE = {
    "FeedState": "ors_lab.viewer.feed_state",
    "Watch": "ors_lab.notebook.watch",
    "WatchPage": "ors_lab.viewer.watch",
    "serve_watch": "ors_lab.viewer.watch",
    "watch": "ors_lab.notebook.watch",
}
"""Names this package held before they moved up a layer: deprecated aliases, loaded by name when used (the
feed itself never imports a layer above its own)."""


_own, __dir__ = _lazy(__name__, {"FEED_KINDS": "ors_lab.feed.server", "Feed": "ors_lab.feed.server",
                                 "FeedReader": "ors_lab.feed.reader", "feed_url": "ors_lab.feed.reader"})  # fmt: skip
"""Its own names load on first use: a run's dashboard reads the feed's plan (``ors_lab.feed.plan``) without the
feed's server and reader."""


def __getattr__(name: str) -> Any:
    if name in _ABOVE:
        warnings.warn(f"ors_lab.feed.{name} moved to {_ABOVE[name]}.{name}; the old name will go", DeprecationWarning,
                      stacklevel=2)  # fmt: skip
        return getattr(importlib.import_module(_ABOVE[name]), name)
    return _own(name)
