// A burst of requests from the official JavaScript client, @kubernetes/client-node, at its default settings
// (a new https.Agent, hence a new TLS connection, for every request). Usage:
//   node jsburst.mjs KUBECONFIG NAMESPACE COUNT
// creates COUNT ConfigMaps and lists the namespace's ConfigMaps COUNT times, all at once, then prints one JSON
// line: {"created": n, "listed": n, "failed": n, "errors": [first few messages]}.
import * as k8s from "@kubernetes/client-node";

const [kubeconfig, namespace, countText] = process.argv.slice(2);
const count = Number(countText);
const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfig);
const core = kc.makeApiClient(k8s.CoreV1Api);

const describe = (e) => `${e?.code ?? ""} ${e?.message ?? e}`.trim().slice(0, 300);
const creates = Array.from({ length: count }, (_, i) =>
  core.createNamespacedConfigMap({ namespace, body: { metadata: { name: `burst-${i}` }, data: { i: `${i}` } } }));
const lists = Array.from({ length: count }, () => core.listNamespacedConfigMap({ namespace }));
const created = await Promise.allSettled(creates);
const listed = await Promise.allSettled(lists);
const failures = [...created, ...listed].filter((r) => r.status === "rejected").map((r) => describe(r.reason));
console.log(JSON.stringify({
  created: created.filter((r) => r.status === "fulfilled").length,
  listed: listed.filter((r) => r.status === "fulfilled" && Array.isArray(r.value.items)).length,
  failed: failures.length,
  errors: failures.slice(0, 5),
}));
