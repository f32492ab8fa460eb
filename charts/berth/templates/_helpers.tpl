{{/* Labels Helm adds to every object, beside each object's own (the kustomize base's). */}}
{{- define "berth.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ include "berth.tag" . | quote }}
{{- end }}

{{/* The images' tag: image.tag, else the release the chart ships (appVersion). */}}
{{- define "berth.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end }}

{{/* berth.image: the image of one component, e.g. include "berth.image" (list . "berth-router"). */}}
{{- define "berth.image" -}}
{{- $root := index . 0 -}}
{{- $tag := include "berth.tag" $root -}}
{{- if eq $tag "latest" }}{{ fail "image.tag: latest is not a release; name one (the chart's appVersion is the default)" }}{{ end -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $root.Values.image.registry) (index . 1) $tag -}}
{{- end }}

{{/* The pod-level settings every component shares. */}}
{{- define "berth.podCommon" -}}
{{- $root := index . 0 -}}
{{- $c := index . 1 -}}
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.nodeSelector }}
nodeSelector:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- with $c.tolerations }}
tolerations:
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/* The least-privilege container settings every component shares. */}}
{{- define "berth.containerSecurityContext" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end }}

{{/*
berth.fromFile renders the objects of a file the chart carries from the kustomize base
(files/, copied by `make manifests`, so the two cannot drift): in the release namespace
where the base says berth-system, with Helm's labels added. Used for RBAC and CRDs.
include "berth.fromFile" (list . "files/rbac/router.yaml")
*/}}
{{- define "berth.fromFile" -}}
{{- $root := index . 0 -}}
{{- $path := index . 1 -}}
{{- $extraAnnotations := dict -}}
{{- if gt (len .) 2 }}{{ $extraAnnotations = index . 2 }}{{ end -}}
{{- range $doc := regexSplit "(?m)^---[ \t]*$" ($root.Files.Get $path) -1 }}
{{- $obj := fromYaml $doc }}
{{- if hasKey $obj "Error" }}{{ fail (printf "%s: %s" $path $obj.Error) }}{{ end }}
{{- if $obj }}
{{- if eq (dig "metadata" "namespace" "" $obj) "berth-system" }}{{ $_ := set $obj.metadata "namespace" $root.Release.Namespace }}{{ end }}
{{- range $s := (get $obj "subjects" | default list) }}
{{- if eq (get $s "namespace" | default "") "berth-system" }}{{ $_ := set $s "namespace" $root.Release.Namespace }}{{ end }}
{{- end }}
{{- $_ := set $obj.metadata "labels" (merge (get $obj.metadata "labels" | default dict) (include "berth.labels" $root | fromYaml)) }}
{{- if $extraAnnotations }}{{ $_ := set $obj.metadata "annotations" (merge (get $obj.metadata "annotations" | default dict) $extraAnnotations) }}{{ end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end }}

{{/* berth.pdb: a PodDisruptionBudget for a component, e.g. (list . "berth-router" .Values.router). */}}
{{- define "berth.pdb" -}}
{{- $root := index . 0 -}}
{{- $name := index . 1 -}}
{{- $c := index . 2 -}}
{{- if and $c.enabled $root.Values.podDisruptionBudget.enabled (gt (int $c.replicas) 1) }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ $name }}
  namespace: {{ $root.Release.Namespace }}
  labels:
    app.kubernetes.io/name: {{ $name }}
    app.kubernetes.io/part-of: berth
    {{- include "berth.labels" $root | nindent 4 }}
spec:
  maxUnavailable: 1
  selector:
    matchLabels:
      app.kubernetes.io/name: {{ $name }}
{{- end }}
{{- end }}

{{/*
berth.manage: controller.manage, or, when it is empty, "all" unless another project's CRDs of
Berth's kinds are already on the cluster (Kthena's, llmaz's, llm-d's): then two controllers
would fight over the same objects, so the install stops and asks which to choose. (helm
template cannot see the cluster and chooses all.)
*/}}
{{- define "berth.manage" -}}
{{- if .Values.controller.manage -}}
{{- .Values.controller.manage -}}
{{- else -}}
{{- $foreign := list -}}
{{- range $crd := list "modelservings.workload.serving.volcano.sh" "modelroutes.networking.serving.volcano.sh" "playgrounds.inference.llmaz.io" "variantautoscalings.llmd.ai" -}}
{{- $found := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $crd -}}
{{- if and $found (ne (dig "metadata" "annotations" "meta.helm.sh/release-name" "" $found) $.Release.Name) -}}
{{- $foreign = append $foreign $crd -}}
{{- end -}}
{{- end -}}
{{- if $foreign -}}
{{- fail (printf "this cluster already has %s, installed by another project: another controller may act on these objects. Choose which objects berth-controller acts on: --set controller.manage=berth (only objects meant for Berth: ModelServings whose pods name berth-scheduler, other kinds labelled serving.berth.sh/managed=true; beside Kthena's controller, llmaz or llm-d) or --set controller.manage=all (Berth is the only controller of these kinds: stop the other first). docs/install.md, \"Beside Kthena, llmaz and llm-d\"" (join ", " $foreign)) -}}
{{- end -}}
all
{{- end -}}
{{- end }}
