{{/* Names, labels and the values derived from the Pulsar release. */}}

{{- define "plbo.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "plbo.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "plbo.selectorLabels" -}}
app.kubernetes.io/name: {{ include "plbo.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "plbo.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "plbo.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: load-balancer
app.kubernetes.io/part-of: pulsar
{{- end }}

{{- define "plbo.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "plbo.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The apache/pulsar chart's full name ("pulsar.fullname" in its _helpers.tpl): its fullnameOverride, else
the release name when it contains the chart name "pulsar", else <release>-pulsar. */}}
{{- define "plbo.pulsarFullname" -}}
{{- if .Values.pulsar.fullnameOverride }}
{{- .Values.pulsar.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else if contains "pulsar" .Values.pulsar.release }}
{{- .Values.pulsar.release | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-pulsar" .Values.pulsar.release | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}

{{/* The Pulsar chart's broker Service (its broker-service.yaml): <pulsar fullname>-<broker.component>. */}}
{{- define "plbo.brokerService" -}}
{{- printf "%s-%s" (include "plbo.pulsarFullname" .) .Values.pulsar.brokerComponent }}
{{- end }}

{{- define "plbo.adminUrl" -}}
{{- if .Values.pulsar.adminUrl }}
{{- .Values.pulsar.adminUrl }}
{{- else if .Values.tls.enabled }}
{{- printf "https://%s:8443" (include "plbo.brokerService" .) }}
{{- else }}
{{- printf "http://%s:8080" (include "plbo.brokerService" .) }}
{{- end }}
{{- end }}

{{- define "plbo.auditServiceUrl" -}}
{{- if .Values.audit.serviceUrl }}
{{- .Values.audit.serviceUrl }}
{{- else if .Values.tls.enabled }}
{{- printf "pulsar+ssl://%s:6651" (include "plbo.brokerService" .) }}
{{- else }}
{{- printf "pulsar://%s:6650" (include "plbo.brokerService" .) }}
{{- end }}
{{- end }}

{{- define "plbo.tokenSecret" -}}
{{- default (printf "%s-token-%s" .Values.pulsar.release .Values.auth.token.role) .Values.auth.token.secretName }}
{{- end }}

{{- define "plbo.controlSecret" -}}
{{- default (printf "%s-control" (include "plbo.fullname" .)) .Values.controls.existingSecret }}
{{- end }}

{{- define "plbo.caSecret" -}}
{{- default (printf "%s-ca-tls" .Values.pulsar.release) .Values.tls.ca.secretName }}
{{- end }}

{{/* "true" when leader election is on: unless leaderElection.enabled is false (null, as set by older values
files, counts as on). */}}
{{- define "plbo.leaderElection" -}}
{{- $enabled := .Values.leaderElection.enabled -}}
{{- if or (kindIs "invalid" $enabled) $enabled }}true{{ end }}
{{- end }}

{{/* Rules across values that the schema cannot express; each failure names the key. */}}
{{- define "plbo.validate" -}}
{{- $le := .Values.leaderElection -}}
{{- if and (gt (int .Values.replicaCount) 1) (not (include "plbo.leaderElection" .)) }}
{{- fail (printf "leaderElection.enabled: replicaCount %v needs leader election, or every replica would act" .Values.replicaCount) }}
{{- end }}
{{- if and (gt (int .Values.replicaCount) 1) .Values.persistence.enabled }}
{{- fail (printf "persistence.enabled: one claim cannot serve replicaCount %v: the lock on the state file admits one pod and the others would exit; keep the emptyDir (each replica its own state) or run one replica" .Values.replicaCount) }}
{{- end }}
{{- if eq (.Values.updateStrategy.type | default "") "RollingUpdate" }}
{{- if not (include "plbo.leaderElection" .) }}
{{- fail "updateStrategy.type: RollingUpdate needs leader election, or the old and the new pod would both act" }}
{{- else if .Values.persistence.enabled }}
{{- fail "updateStrategy.type: RollingUpdate with persistence.enabled would start the new pod beside the old one on a state file whose lock admits one; use Recreate" }}
{{- end }}
{{- end }}
{{- if not (lt (float64 $le.renewDeadlineSeconds) (float64 $le.leaseDurationSeconds)) }}
{{- fail "leaderElection.renewDeadlineSeconds: must be less than leaderElection.leaseDurationSeconds (the leader must stop acting before a standby may take over)" }}
{{- end }}
{{- if not (lt (float64 $le.retryPeriodSeconds) (float64 $le.renewDeadlineSeconds)) }}
{{- fail "leaderElection.retryPeriodSeconds: must be less than leaderElection.renewDeadlineSeconds" }}
{{- end }}
{{- range $key, $value := .Values.spark.conf }}
{{- /* by the key's name, or by a value that carries one: a URL's user:password@, a password= parameter */}}
{{- if or (regexMatch "(?i)(secret|password|token|\\.key$)" $key) (regexMatch "(?i)(://[^/@\\s:]+:[^/@\\s]+@|[?&;](password|passwd|pwd|secret|token)=)" (toString $value)) }}
{{- fail (printf "spark.conf.%s: a credential here would sit in plain text in the Deployment's environment (kubectl get deploy -o yaml, /proc/<pid>/environ); give it through extraEnv from a Secret (for s3a: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY) or the pod's own identity (IRSA)" $key) }}
{{- end }}
{{- end }}
{{- end }}

{{/* "true" when an upgrade may run the new pod beside the old one: only the Lease holder acts, and no
claim is shared (the state file's lock admits one pod). */}}
{{- define "plbo.rollingUpdate" -}}
{{- if and (include "plbo.leaderElection" .) (not .Values.persistence.enabled) }}true{{ end }}
{{- end }}

{{- define "plbo.dataDir" -}}/var/lib/pulsar-lb-operator{{- end }}
{{- define "plbo.configDir" -}}/etc/pulsar-lb-operator{{- end }}

{{/* The operator's settings file: every operator setting and Pulsar's load-balancer keys. */}}
{{- define "plbo.settings" -}}
{{- $data := include "plbo.dataDir" . -}}
{{- $s := deepCopy .Values.settings -}}
{{- $_ := set $s "adminUrl" (include "plbo.adminUrl" .) -}}
{{- if .Values.pulsar.cluster }}{{- $_ := set $s "cluster" .Values.pulsar.cluster -}}{{- end }}
{{- if .Values.auth.token.enabled }}
{{- $_ := set $s "tokenFile" (printf "%s/token/token" (include "plbo.configDir" .)) -}}
{{- end }}
{{- if .Values.tls.ca.enabled }}
{{- $_ := set $s "caBundle" (printf "%s/tls/ca.crt" (include "plbo.configDir" .)) -}}
{{- end }}
{{- $_ := set $s "authPlugin" (include "plbo.authPlugin" .) -}}
{{- if .Values.auth.tls.enabled }}
{{- $_ := set $s "tlsCertFile" (printf "%s/client-cert/tls.crt" (include "plbo.configDir" .)) -}}
{{- $_ := set $s "tlsKeyFile" (printf "%s/client-cert/tls.key" (include "plbo.configDir" .)) -}}
{{- else }}
{{- $_ := set $s "tlsCertFile" "" -}}
{{- $_ := set $s "tlsKeyFile" "" -}}
{{- end }}
{{- $_ := set $s "oauth2IssuerUrl" .Values.auth.oauth2.issuerUrl -}}
{{- $_ := set $s "oauth2Audience" .Values.auth.oauth2.audience -}}
{{- $_ := set $s "oauth2Scope" .Values.auth.oauth2.scope -}}
{{- $_ := set $s "oauth2CredentialsFile" (ternary (printf "%s/oauth2/credentials.json" (include "plbo.configDir" .)) "" .Values.auth.oauth2.enabled) -}}
{{- $_ := set $s "controlTokenFile" (ternary (printf "%s/control/token" (include "plbo.configDir" .)) "" .Values.controls.enabled) -}}
{{- $_ := set $s "tlsVerify" .Values.tls.verify -}}
{{- $_ := set $s "dryRun" .Values.dryRun -}}
{{- $_ := set $s "stateFile" (printf "%s/state/operator-state.json" $data) -}}
{{- $_ := set $s "historyUri" (default (printf "%s/history" $data) .Values.history.uri) -}}
{{- $_ := set $s "historyRetentionDays" .Values.history.retentionDays -}}
{{- $_ := set $s "historyMaxMegabytes" .Values.history.maxMegabytes -}}
{{- $_ := set $s "historyMinuteHours" .Values.history.minuteHours -}}
{{- $_ := set $s "profileUri" (default (printf "%s/profile" $data) .Values.history.profileUri) -}}
{{- $_ := set $s "sparkMaster" .Values.spark.master -}}
{{- $_ := set $s "aggregateEveryMinutes" .Values.spark.aggregateEveryMinutes -}}
{{- $_ := set $s "metricsPort" .Values.metrics.port -}}
{{- $_ := set $s "metricsHost" "0.0.0.0" -}}
{{- $service := printf "%s-metrics" (include "plbo.fullname" .) -}}
{{- $serviceNames := list $service (printf "%s.%s" $service .Release.Namespace) (printf "%s.%s.svc" $service .Release.Namespace) (printf "%s.%s.svc.cluster.local" $service .Release.Namespace) -}}
{{- $_ := set $s "statusPageHosts" (concat $serviceNames .Values.metrics.statusPageHosts) -}}
{{- $_ := set $s "auditEnabled" .Values.audit.enabled -}}
{{- $_ := set $s "auditServiceUrl" (include "plbo.auditServiceUrl" .) -}}
{{- $_ := set $s "auditTopic" .Values.audit.topic -}}
{{- $_ := set $s "auditSpoolDir" (printf "%s/audit-spool" $data) -}}
{{- $_ := set $s "auditSpoolMaxMegabytes" .Values.audit.spoolMaxMegabytes -}}
{{- $_ := set $s "shutdownTimeoutSeconds" (sub (int .Values.terminationGracePeriodSeconds) 10) -}}
{{- $_ := set $s "leaderElection" (eq (include "plbo.leaderElection" .) "true") -}}
{{- $_ := set $s "leaseName" (include "plbo.fullname" .) -}}
{{- $_ := set $s "leaseNamespace" .Release.Namespace -}}
{{- $_ := set $s "leaseDurationSeconds" .Values.leaderElection.leaseDurationSeconds -}}
{{- $_ := set $s "renewDeadlineSeconds" .Values.leaderElection.renewDeadlineSeconds -}}
{{- $_ := set $s "retryPeriodSeconds" .Values.leaderElection.retryPeriodSeconds -}}
{{- toYaml (merge $s .Values.loadBalancer) }}
{{- end }}

{{- define "plbo.sparkSubmitArgs" -}}
{{- $args := list -}}
{{- if not (hasPrefix "local" .Values.spark.master) }}
{{- $args = append $args "--conf spark.driver.host=$(POD_IP)" -}}
{{- $args = append $args "--conf spark.driver.bindAddress=0.0.0.0" -}}
{{- $args = append $args (printf "--conf spark.driver.port=%v" .Values.spark.driverPort) -}}
{{- $args = append $args (printf "--conf spark.blockManager.port=%v" .Values.spark.blockManagerPort) -}}
{{- end }}
{{- range $key, $value := .Values.spark.conf }}
{{- $args = append $args (printf "--conf %s" (printf "%s=%v" $key $value | squote)) -}}
{{- end }}
{{- join " " $args }}
{{- end }}

{{/* The authPlugin setting: auth.plugin, else oauth2 / tls / token from what is enabled, else none. */}}
{{- define "plbo.authPlugin" -}}
{{- if .Values.auth.plugin }}{{ .Values.auth.plugin }}
{{- else if .Values.auth.oauth2.enabled }}oauth2
{{- else if and .Values.auth.tls.enabled (not .Values.auth.token.enabled) }}tls
{{- else if .Values.auth.token.enabled }}token
{{- else }}none
{{- end }}
{{- end }}
