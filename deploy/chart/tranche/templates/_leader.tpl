{{- /* Beat and the watcher are leader-elected (controller/leader.py, docs/install.md "Leader
election"): any number of replicas, one holding its Lease in the release namespace runs, the
others wait set up. The Lease is the guard, so a rollout may start the new pod first: it waits
as a standby and takes over when the old one gives the Lease up on SIGTERM. */ -}}
{{- define "tranche.leaderStrategy" -}}
strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}
{{- end }}

{{- /* Who holds the Lease (and names its heartbeat row): the pod, not the host, which two
replicas on the host network share. */ -}}
{{- define "tranche.leaderEnv" -}}
- name: POD_NAME
  valueFrom: {fieldRef: {fieldPath: metadata.name}}
- name: POD_NAMESPACE
  valueFrom: {fieldRef: {fieldPath: metadata.namespace}}
{{- end }}
