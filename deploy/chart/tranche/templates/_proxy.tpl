{{- /* The proxies in front of the portal (portal.proxy, docs/install.md "Behind a proxy"): how
many X-Forwarded-For entries are theirs, and which header says the request came over HTTPS. */ -}}
{{- define "tranche.proxyEnv" -}}
- {name: TRANCHE_TRUSTED_PROXY_HOPS, value: {{ .Values.portal.proxy.trustedHops | quote }}}
{{- with .Values.portal.proxy.sslHeader }}
- {name: TRANCHE_PROXY_SSL_HEADER, value: {{ . | quote }}}
{{- end }}
{{- end }}
