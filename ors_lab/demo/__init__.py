"""The bundled demo: ORS environments and a launcher for the reference servers.

`ors_lab.demo.env` holds the demo environments (served by the `ors-sdk` server) and
`ors_lab.demo.launch` starts a reference server in a subprocess on 127.0.0.1. Neither is
imported here, so `import ors_lab.demo` stays cheap.
"""
