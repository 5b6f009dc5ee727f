{{/* The name of every object: the release's, at most 63 characters. */}}
{{- define "kafka-autoscaler.fullname" -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "kafka-autoscaler.labels" -}}
app.kubernetes.io/name: kafka-autoscaler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* What selects the consumer pods. */}}
{{- define "kafka-autoscaler.selector" -}}
app.kubernetes.io/name: kafka-autoscaler
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: consumer
{{- end -}}

{{/* The leader's Lease (named here so the Role can name it too). */}}
{{- define "kafka-autoscaler.lease" -}}
{{- printf "%s-leader" (include "kafka-autoscaler.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* A number as the settings parse it: values files give every number as a float, which
     Go would print 16777216 as 1.6777216e+07. */}}
{{- define "kafka-autoscaler.number" -}}
{{- if kindIs "string" . -}}
{{- . -}}
{{- else if eq (float64 .) (float64 (int64 .)) -}}
{{- int64 . -}}
{{- else -}}
{{- . -}}
{{- end -}}
{{- end -}}

{{- define "kafka-autoscaler.image" -}}
{{- printf "%s:%s" .repository .tag -}}
{{- end -}}

{{/* Pods pass the "restricted" Pod Security Standard: non-root, the runtime's default
     seccomp profile, and (containerSecurity) no capabilities, no privilege escalation. */}}
{{- define "kafka-autoscaler.podSecurity" -}}
runAsNonRoot: true
runAsUser: 10001
seccompProfile: {type: RuntimeDefault}
{{- end -}}

{{- define "kafka-autoscaler.containerSecurity" -}}
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities: {drop: [ALL]}
{{- end -}}

{{/* The sidecar's Kubernetes credentials, as Kubernetes itself would mount them (a token
     bound to the pod and rotated, the cluster's CA, the namespace), but into the sidecar
     container alone: the consumer, which runs the user's sink code and reads the records,
     holds no token (the pod sets automountServiceAccountToken: false). */}}
{{- define "kafka-autoscaler.tokenVolume" -}}
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken: {path: token, expirationSeconds: 3607}
      - configMap: {name: kube-root-ca.crt, items: [{key: ca.crt, path: ca.crt}]}
      - downwardAPI:
          items: [{path: namespace, fieldRef: {fieldPath: metadata.namespace}}]
{{- end -}}

{{- define "kafka-autoscaler.tokenMount" -}}
- {name: kube-api-access, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
{{- end -}}

{{/* sidecar.statusTokenSecret: a Secret whose key "token" is the bearer token /status asks
     for (without one, /status is closed on the pod's address). */}}
{{- define "kafka-autoscaler.statusTokenVolume" -}}
{{- with .Values.sidecar.statusTokenSecret }}
- name: status-token
  secret: {secretName: {{ . | quote }}, defaultMode: 0400, items: [{key: token, path: token}]}
{{- end }}
{{- end -}}

{{- define "kafka-autoscaler.statusTokenMount" -}}
{{- if .Values.sidecar.statusTokenSecret }}
- {name: status-token, mountPath: /etc/kafka-autoscaler/status-token, readOnly: true}
{{- end }}
{{- end -}}

{{- define "kafka-autoscaler.statusTokenEnv" -}}
{{- if .Values.sidecar.statusTokenSecret }}
- {name: AUTOSCALER_STATUS_TOKEN_FILE, value: /etc/kafka-autoscaler/status-token/token}
{{- end }}
{{- end -}}

{{/* The consumer's arguments: a sink must be named (no default discards records), and the
     Spark sink needs a warehouse or a Spark Connect server to write to. */}}
{{- define "kafka-autoscaler.consumerArgs" -}}
{{- $args := .Values.consumer.args -}}
{{- if not (has "--sink" $args) -}}
{{- fail "consumer.args: say where records go: [\"--sink\", \"spark\"] with extraSettings.AUTOSCALER_SPARK_WAREHOUSE (or AUTOSCALER_SPARK_REMOTE), or [\"--sink\", \"null\"] to discard every record on purpose" -}}
{{- end -}}
{{- if and (has "spark" $args) (not (or (hasKey .Values.extraSettings "AUTOSCALER_SPARK_WAREHOUSE") (hasKey .Values.extraSettings "AUTOSCALER_SPARK_REMOTE"))) -}}
{{- fail "consumer.args --sink spark: set extraSettings.AUTOSCALER_SPARK_WAREHOUSE (a path on a volume every pod mounts) or AUTOSCALER_SPARK_REMOTE (a Spark Connect server)" -}}
{{- end -}}
{{- toJson $args -}}
{{- end -}}
