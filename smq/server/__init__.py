"""The SQS-compatible HTTP service: ``smq serve``.

Speaks the AWS JSON 1.0 protocol (current SDKs, boto3, the AWS CLI) and the
AWS Query protocol (older SDKs) on top of the queue core. Stateless: any
number of processes may serve the same Redis.
"""

from ._app import Service, log_to_stderr, make_app, run
from ._context import ServerConfig

__all__ = ["ServerConfig", "Service", "log_to_stderr", "make_app", "run"]
