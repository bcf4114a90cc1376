import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # ors_lab in marimo

    The views of ors_lab are anywidgets, which marimo draws natively: a session, the evaluation
    dashboard, the trace viewer and a comparison show here as they do in JupyterLab, from the same
    view states and the same JavaScript, and they update live while their cell runs. This notebook
    starts the bundled demo environments on 127.0.0.1, so it needs no server, key or network:

    ```sh
    pip install 'ors-lab[marimo]'
    marimo edit notebooks/05-marimo.py
    ```

    `marimo export html notebooks/05-marimo.py -o run.html` writes the page with every view as it
    stood when its cell ended.
    """)
    return


@app.cell
def _():
    import tempfile
    from pathlib import Path

    import marimo as mo

    import ors_lab as ol
    from ors_lab.demo.agent import DemoAgent
    from ors_lab.demo.launch import serve

    runs = Path(tempfile.mkdtemp(prefix="ors-lab-marimo-"))  # this notebook's trace goes here
    return DemoAgent, mo, ol, runs, serve


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## A session, live

    The session's view appears in the cell that opens it: the prompt, each call with its input and
    output, the rewards, the keep-alive heartbeat and the session's state.
    """)
    return


@app.cell
def _(ol, serve):
    with serve() as _server, ol.Client(_server.url) as _client:
        with _client.environment("guessing").session(split="test", index=0) as _session:
            for _number in (50, 25, 12):
                _session.call("guess", {"number": _number})
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## The demo agent, evaluated

    `DemoAgent` plays the guessing game by halving the range, thinking aloud as it goes; with five
    guesses at most, some episodes run out of steps. The dashboard fills in while the cell runs:
    progress, the mean reward ± its standard error, pass@k, the tasks × rollouts grid (click a
    cell to read that episode's transcript), the charts and the live episodes. marimo shows what a
    cell appends unless its last expression replaces it, so the cell ends with the assignment.
    """)
    return


@app.cell
def _(DemoAgent, ol, runs, serve):
    with serve() as _server, ol.Client(_server.url) as _client:
        result = ol.evaluate(_client.environment("guessing"), DemoAgent(pace=0.02), split="test", rollouts=3,
                             max_steps=5, record=runs / "run.parquet")
    return (result,)


@app.cell
def _(result):
    result
    return


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## The run's trace

    Every event of the run was recorded. The viewer lists its episodes a page at a time; click one
    to read its timeline: requests, SSE events, pings, tool calls, rewards and the agent's turns.
    """)
    return


@app.cell
def _(ol, runs):
    trace = ol.load_trace(runs / "run.parquet")
    trace
    return (trace,)


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    ## Two runs compared

    Two committed runs on the arithmetic problems, task by task: the paired delta with its interval
    and p-value; click a task to see both runs' episodes side by side.
    """)
    return


@app.cell
def _(mo, ol):
    _recordings = mo.notebook_dir().parent / "recordings"
    comparison = ol.compare(_recordings / "openai-arithmetic.parquet", _recordings / "claude-arithmetic.parquet")
    comparison
    return (comparison,)


@app.cell
def _(comparison, mo, result, trace):
    assert len(result.episodes) == 30 and len(trace.episodes) == 30 and len(comparison.tasks) > 0
    mo.plain_text("notebook ok")
    return


if __name__ == "__main__":
    app.run()
