"""Admission plugins of kube-apiserver that lite runs as `Strategies` admission hooks: admission webhooks
(`webhooks.py`, configured by `webhookconfig.py` objects, matched by `matching.py`, spoken to with
`review.py`) and Pod Security Admission (`podsecurity.py` over the pure checks of `psachecks.py`).

`add_admission_plugins` registers them in upstream's order — mutating webhooks, then Pod Security (validating
only), then validating webhooks — and returns the background tasks they need (the informers of the webhook
configurations and of namespaces, whose labels both plugins read).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from lite.client import Client
from lite.kinds import KindRegistry
from lite.server.admission.namespaces import NamespaceLabels
from lite.server.admission.podsecurity import PodSecurityAdmission
from lite.server.admission.webhookconfig import MUTATING, VALIDATING
from lite.server.admission.webhooks import GROUP, WebhookAdmission
from lite.server.api.strategies import Strategies

Background = Callable[[], Awaitable[None]]


def add_admission_plugins(client: Client, kinds: KindRegistry,
                          strategies: Strategies) -> list[tuple[str, Background]]:
    strategies.register(f"ValidatingWebhookConfiguration.{GROUP}", VALIDATING)
    strategies.register(f"MutatingWebhookConfiguration.{GROUP}", MUTATING)
    ns_kind = kinds.by_resource("", "v1", "namespaces")
    if ns_kind is None:
        raise RuntimeError("namespaces are not registered")
    namespaces = NamespaceLabels(client, ns_kind)
    webhooks = WebhookAdmission(client, kinds, strategies, namespaces)
    strategies.add_admission(webhooks.mutate)
    strategies.add_admission(PodSecurityAdmission(client, kinds, namespaces).admit)
    strategies.add_admission(webhooks.validate)
    strategies.add_connect_admission(webhooks.connect)  # exec, attach, portforward, proxy
    return [("admission-webhooks", webhooks.run)]
