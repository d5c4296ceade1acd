{{/* Names, labels, image references and the environment every Tranche process shares. */}}

{{- define "tranche.labels" -}}
app.kubernetes.io/name: tranche
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tranche
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}

{{- define "tranche.selector" -}}
app.kubernetes.io/name: tranche
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "tranche.image" -}}
{{ printf "%s/%s:%s" .root.Values.image.registry .name (.root.Values.image.tag | default .root.Chart.AppVersion) }}
{{- end }}

{{- define "tranche.secretName" -}}
{{ .Values.existingSecret | default (printf "%s-secrets" .Release.Name) }}
{{- end }}

{{- define "tranche.portalService" -}}
{{ printf "%s-portal" .Release.Name }}
{{- end }}

{{- /* The node agents' ingest Service (portal.ingest.enabled), else the portal's. */ -}}
{{- define "tranche.ingestService" -}}
{{ ternary (printf "%s-portal-ingest" .Release.Name) (include "tranche.portalService" .) .Values.portal.ingest.enabled }}
{{- end }}

{{/* Settings come from the environment (portal/settings.py); secrets as *_FILE. */}}
{{- define "tranche.env" -}}
{{- $dev := eq .Values.mode "development" -}}
- {name: TRANCHE_DEBUG, value: {{ ternary "1" "0" $dev | quote }}}
- {name: TRANCHE_SECRET_KEY_FILE, value: /etc/tranche/secrets/secret-key}
{{- /* Besides the public names: the Service's in-cluster names, which the probes and the node
agents (their websocket origin is the URL they dial) use. */}}
{{- $svc := include "tranche.portalService" . }}
{{- $ingest := include "tranche.ingestService" . }}
{{- $internal := uniq (list $svc (printf "%s.%s.svc" $svc .Release.Namespace) $ingest (printf "%s.%s.svc" $ingest .Release.Namespace)) }}
- {name: TRANCHE_ALLOWED_HOSTS, value: {{ join "," (concat .Values.portal.allowedHosts $internal) | quote }}}
{{- with .Values.portal.csrfTrustedOrigins }}
- {name: TRANCHE_CSRF_TRUSTED_ORIGINS, value: {{ join "," . | quote }}}
{{- end }}
- {name: TRANCHE_DB_HOST, value: {{ .Values.database.host | default (ternary "postgresql" "" $dev) | quote }}}
- {name: TRANCHE_DB_PORT, value: {{ .Values.database.port | quote }}}
- {name: TRANCHE_DB_NAME, value: {{ .Values.database.name | quote }}}
- {name: TRANCHE_DB_USER, value: {{ .Values.database.user | quote }}}
- {name: TRANCHE_DB_CONN_MAX_AGE, value: {{ .Values.database.connMaxAge | quote }}}
- {name: TRANCHE_DB_PASSWORD_FILE, value: /etc/tranche/secrets/db-password}
- {name: TRANCHE_REDIS_URL_FILE, value: /etc/tranche/secrets/redis-url}
- {name: TRANCHE_STATE_DIR, value: /tmp/tranche}
- {name: TRANCHE_LOG_LEVEL, value: {{ .Values.logLevel | quote }}}
{{- with .Values.preflight }}
- {name: TRANCHE_PREFLIGHT_PLAIN_HTTP_REGISTRIES, value: {{ join "," .plainHttpRegistries | quote }}}
- {name: TRANCHE_PREFLIGHT_ALLOWED_REGISTRIES, value: {{ join "," .allowedRegistries | quote }}}
- {name: TRANCHE_PREFLIGHT_TOKEN_REALMS, value: {{ join "," .tokenRealms | quote }}}
- {name: TRANCHE_PREFLIGHT_BLOCKED_NETWORKS, value: {{ join "," .blockedNetworks | quote }}}
- {name: TRANCHE_PREFLIGHT_IMAGE_DEADLINE, value: {{ .imageDeadlineSeconds | quote }}}
- {name: TRANCHE_PREFLIGHT_CALL_DEADLINE, value: {{ .callDeadlineSeconds | quote }}}
- {name: TRANCHE_PREFLIGHT_USER_CONCURRENCY, value: {{ .userConcurrency | quote }}}
- {name: TRANCHE_PREFLIGHT_ORG_CONCURRENCY, value: {{ .orgConcurrency | quote }}}
- {name: TRANCHE_PREFLIGHT_USER_PER_MINUTE, value: {{ .userPerMinute | quote }}}
- {name: TRANCHE_PREFLIGHT_ORG_PER_MINUTE, value: {{ .orgPerMinute | quote }}}
{{- end }}
{{- include "tranche.apiServerEnv" . }}
- {name: TRANCHE_ALLOW_NODE_PORT_SERVICES, value: {{ ternary "1" "0" .Values.tenants.allowNodePortServices | quote }}}
- {name: TRANCHE_TENANT_INGRESS_NAMESPACES, value: {{ join "," .Values.tenants.ingressNamespaces | quote }}}
- {name: TRANCHE_CANCEL_GRACE_SECONDS, value: {{ .Values.tenants.cancelGraceSeconds | quote }}}
- {name: TRANCHE_POD_QUOTA, value: {{ .Values.tenants.podQuota | quote }}}
- {name: TRANCHE_DEFAULT_CPU_REQUEST_MILLICORES, value: {{ .Values.tenants.defaultCpuRequestMillicores | quote }}}
- {name: TRANCHE_DEFAULT_MEMORY_REQUEST_MIB, value: {{ .Values.tenants.defaultMemoryRequestMib | quote }}}
- {name: TRANCHE_DEFAULT_MEMORY_LIMIT_MIB, value: {{ .Values.tenants.defaultMemoryLimitMib | quote }}}
- {name: TRANCHE_PLATFORM_USERS, value: {{ join "," .Values.tenants.platformUsers | quote }}}
{{- end }}

{{/* A read-only root filesystem: /tmp is the one writable place; secrets are files. */}}
{{- define "tranche.volumes" -}}
- name: tmp
  emptyDir: {medium: Memory, sizeLimit: 64Mi}
- name: secrets
  secret:
    secretName: {{ include "tranche.secretName" . }}
{{- end }}

{{- define "tranche.volumeMounts" -}}
- {name: tmp, mountPath: /tmp}
- {name: secrets, mountPath: /etc/tranche/secrets, readOnly: true}
{{- end }}

{{- define "tranche.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile: {type: RuntimeDefault}
{{- end }}

{{- define "tranche.containerSecurity" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities: {drop: [ALL]}
{{- end }}

{{/* Probes ask with a host the portal accepts (Django refuses unknown Host headers). */}}
{{- define "tranche.probe" -}}
httpGet:
  path: {{ .path }}
  port: http
  httpHeaders:
    - {name: Host, value: {{ include "tranche.portalService" .root }}}
{{- end }}

{{/* Where the API server is, for pods on the host network without a route to the `kubernetes`
Service (the client libraries read these two variables in-cluster). Nothing by default. */}}
{{- define "tranche.apiServerEnv" -}}
{{- with .Values.platform.apiServer }}
{{- if .host }}
- {name: KUBERNETES_SERVICE_HOST, value: {{ .host | quote }}}
- {name: KUBERNETES_SERVICE_PORT, value: {{ .port | quote }}}
{{- end }}
{{- end }}
{{- end }}

{{/* Node placement and network of the platform's pods (not the node agents': their own). */}}
{{- define "tranche.placement" -}}
{{- with .Values.platform }}
{{- if .hostNetwork }}
hostNetwork: true
{{- end }}
{{- with .nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}
