{{- /* Who may connect to the portal's port (networkPolicies in values.yaml): the namespaces of
the ingress controller(s) by name, the node agents of this release (their websocket), and any
further peers the operator lists (e.g. an ipBlock for a load balancer's health checks, or for
the nodes where the network plugin does not exempt the kubelet's probes). Nothing else: no
tenant pod, no other namespace. */ -}}
{{- define "tranche.portalPeers" -}}
{{- with .Values.networkPolicies.ingressNamespaces }}
- namespaceSelector:
    matchExpressions:
      - {key: kubernetes.io/metadata.name, operator: In, values: {{ toJson . }}}
{{- end }}
- podSelector:
    matchLabels: {{- include "tranche.selector" (dict "root" . "component" "node-agent") | nindent 6 }}
{{- with .Values.networkPolicies.extraPortalPeers }}
{{ toYaml . }}
{{- end }}
{{- end }}
