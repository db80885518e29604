import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium")


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    # xprof_magic in marimo

    marimo runs no IPython magics, so `%%xprof` has a Python form: `xprof_magic.profile`.
    Decorate a function and each call is one capture, with the magic's labels, steps and
    summary; end the cell with `fn.run` to see the verdict, the per-step chart, the runs and
    XProf's trace viewer under it. Without a TPU, torch_xla runs for real on the CPU
    (`PJRT_DEVICE=CPU`), with the same lazy tensors, compiler and profiler.

    Open it with `marimo edit notebooks/marimo_quickstart.py` and run all cells, as an app
    with `marimo run notebooks/marimo_quickstart.py`, or headless as a script:
    `python notebooks/marimo_quickstart.py`.
    """)
    return


@app.cell
def _():
    import glob
    import os

    import marimo as mo

    has_tpu = bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))
    os.environ.setdefault("PJRT_DEVICE", "TPU" if has_tpu else "CPU")
    # The runs beside this notebook, where the Jupyter quickstarts and `make demo` put theirs.
    os.environ.setdefault("XPROF_MAGIC_LOGDIR", str(mo.notebook_dir() / "xprof_logs"))

    import torch
    import torch_xla

    import xprof_magic

    return mo, torch, torch_xla, xprof_magic


@app.cell
def _(torch, torch_xla):
    device = torch_xla.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = [(torch.randn(32, 64), torch.randint(0, 10, (32,))) for _ in range(6)]
    return batches, device, loss_fn, model, optimizer


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    The function's body is profiled as `%%xprof` profiles a cell: each top-level statement
    is a labelled block named after its first line, a `# xprof: NAME` comment starts a block
    `NAME` (inside the loop too), and `steps=True` makes each iteration a step for XProf's
    step tools. The function returns what it always returns.
    """)
    return


@app.cell
def _(batches, device, loss_fn, model, optimizer, torch_xla, xprof_magic):
    @xprof_magic.profile(name="marimo-train", steps=True)
    def train():
        for inputs, targets in batches:
            # xprof: data
            inputs, targets = inputs.to(device), targets.to(device)
            # xprof: forward
            loss = loss_fn(model(inputs), targets)
            # xprof: backward
            optimizer.zero_grad()
            loss.backward()
            # xprof: optimizer
            optimizer.step()
            torch_xla.sync()
        return loss.item()

    final_loss = train()
    train.run
    return (final_loss,)


@app.cell(hide_code=True)
def _(mo):
    mo.md(r"""
    A `with` block is captured too. Its body runs as written, so its labels are the ones it
    opens with `xprof_magic.label`. Every capture is a run in the log directory; the runs
    dropdown switches between them.
    """)
    return


@app.cell
def _(batches, device, model, torch, xprof_magic):
    with xprof_magic.profile(name="marimo-eval") as evaluation:
        with torch.no_grad(), xprof_magic.label("evaluate"):
            correct = sum(
                (model(x.to(device)).argmax(1).cpu() == y).sum().item() for x, y in batches
            )
    accuracy = correct / (32 * len(batches))
    evaluation
    return (accuracy,)


@app.cell
def _(accuracy, final_loss, mo, xprof_magic):
    names = ", ".join(run.name for run in xprof_magic.runs())
    mo.md(f"Loss {final_loss:.4f}, accuracy {accuracy:.1%}. Runs: {names}")
    return


if __name__ == "__main__":
    app.run()
