"""Tests of the protocol core (`ors_lab.protocol`): models, SSE decoder, /call assembler, exceptions."""
