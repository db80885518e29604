"""A summary worker that never answers (``python -m tests._hanging_worker``), for the pool's
timeout test."""

import time

time.sleep(600)
