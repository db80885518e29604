"""What the stages hand on: plain frozen dataclasses, and their JSON form.

:mod:`.summary` is a run's :class:`~.summary.Summary` and its parts; :mod:`.diagnosis` its
step-time breakdown and verdict; :mod:`.comparison` two runs side by side; :mod:`.plain`
the JSON form a summary is saved in. Nothing here reads a file or words a verdict; a
summary and a comparison display themselves through the renderers the render stage
registers for them (:mod:`.shown`): nothing here imports the render stage. Its modules
import each other directly, never through this package.
"""
