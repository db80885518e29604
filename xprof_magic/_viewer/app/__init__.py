"""The app the viewer's process serves: XProf (or TensorBoard) behind the secret guard.

Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""
