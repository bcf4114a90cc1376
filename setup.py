"""The one compiled part: the recorder's hot path (``Recorder.emit``) in C. Everything else is in pyproject.toml.

gcc and Python's headers build it at install; ``make`` rebuilds it when the source changes.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "ors_lab.recording._rows",
            sources=["ors_lab/recording/_rows.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        )
    ]
)
