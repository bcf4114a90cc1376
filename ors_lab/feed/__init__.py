"""The live feed of a run, and watching one (``ors_lab.feed``; ``docs/feed.md`` is the wire format).

``Feed`` serves a run's events on 127.0.0.1 as Server-Sent Events (``evaluate(..., feed=PORT)``
makes one). ``watch(url)`` shows the dashboard of the run behind a feed, in a notebook or as a
line; ``serve_watch(url)`` serves it as a page (``ors-lab watch URL``). Both rebuild the run's
dashboard state (``FeedState``) from the feed's events, read by a ``FeedReader``.
"""

from ors_lab.feed.reader import FeedReader, feed_url
from ors_lab.feed.server import FEED_KINDS, Feed
from ors_lab.feed.state import FeedState
from ors_lab.feed.watch import Watch, WatchPage, serve_watch, watch

__all__ = ["FEED_KINDS", "Feed", "FeedReader", "FeedState", "Watch", "WatchPage", "feed_url", "serve_watch", "watch"]
