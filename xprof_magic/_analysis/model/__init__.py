"""What the stages hand on: plain frozen dataclasses, and their JSON form.

Its modules, and what each holds, are in ARCHITECTURE.md's table.
"""
