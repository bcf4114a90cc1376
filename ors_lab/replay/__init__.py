"""Replay: recorded traces served back as an ORS server or an httpx2 transport, with faults."""

from ors_lab.replay.agent import AgentReplayTransport
from ors_lab.replay.engine import ReplayEngine
from ors_lab.replay.faults import Fault
from ors_lab.replay.forward import ForwardingReplay
from ors_lab.replay.serve import ReplayServer, ReplayTransport

__all__ = ["AgentReplayTransport", "Fault", "ForwardingReplay", "ReplayEngine", "ReplayServer", "ReplayTransport"]
