"""The hostile suite: servers, streams and traces that misbehave on purpose, and what ors_lab does then."""
