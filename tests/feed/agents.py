"""Agents ``ors-lab eval --agent MODULE:OBJECT`` runs in the feed's tests."""

from ors_lab.demo.agent import DemoAgent

SLOW = DemoAgent(pace=0.01)
"""The demo agent with 10 ms between its words: 30 guessing episodes at concurrency 2 last about 15 s."""
