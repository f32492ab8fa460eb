package modelbooster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	workloadv1alpha1 "github.com/berth-sh/berth/pkg/apis/workload/v1alpha1"
)

const (
	// loraHTTPTimeout bounds one call to an engine's LoRA API: a stuck engine must not hold
	// a reconcile worker.
	loraHTTPTimeout = 3 * time.Second
	// loraRetry is how soon a failed adapter load is tried again.
	loraRetry = 5 * time.Second
	// loraResync is how often the adapters of a healthy backend are checked anyway: an
	// engine that restarted in place forgets its adapters without its pod changing.
	loraResync = 2 * time.Minute
)

// engineServing says whether a pod's engine can be called: Ready, with an IP, not going away.
func engineServing(p *corev1.Pod) bool {
	return p.DeletionTimestamp == nil && p.Status.PodIP != "" && podReady(p)
}

func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, c := range p.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

// podReady says whether a Running pod has its Ready condition (as the ModelServing
// controller counts a ready group).
func podReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// syncAdapters makes every Ready engine of every backend with LoRA adapters hold exactly
// those adapters (loading the missing ones, unloading the ones the spec dropped) and
// reports the result as the LoRAAdaptersLoaded condition (nil when no backend has any).
func (r *Reconciler) syncAdapters(ctx context.Context, mb *workloadv1alpha1.ModelBooster) *metav1.Condition {
	var failures, waiting []string
	engines, hasAdapters := 0, false
	for _, b := range Backends(mb) {
		if len(b.LoraAdapters) == 0 {
			continue
		}
		hasAdapters = true
		name := ObjectName(mb.Name, b.Name)
		var pods corev1.PodList
		if err := r.List(ctx, &pods, client.InNamespace(mb.Namespace),
			client.MatchingLabels{workloadv1alpha1.ModelServingNameLabel: name, workloadv1alpha1.EntryLabel: "true"}); err != nil {
			failures = append(failures, fmt.Sprintf("backend %s: list pods: %v", b.Name, err))
			continue
		}
		ready := 0
		for pi := range pods.Items {
			p := &pods.Items[pi]
			if !engineServing(p) || !servesModel(workloadv1alpha1.ModelWorkerType(p.Labels[workloadv1alpha1.RoleLabel])) {
				continue
			}
			ready++
			if err := r.syncPodAdapters(ctx, mb, b, p); err != nil {
				failures = append(failures, fmt.Sprintf("pod %s: %v", p.Name, err))
				r.event(mb, p, corev1.EventTypeWarning, ReasonAdapterLoadFailed, actionLoadAdapter, "pod %s: %v", p.Name, err)
				continue
			}
			engines++
		}
		if ready == 0 {
			ms := &workloadv1alpha1.ModelServing{}
			if err := r.Get(ctx, types.NamespacedName{Namespace: mb.Namespace, Name: name}, ms); err != nil || ms.Spec.Replicas == nil || *ms.Spec.Replicas > 0 {
				waiting = append(waiting, fmt.Sprintf("backend %s has no Ready engine yet", b.Name))
			}
		}
	}
	if !hasAdapters {
		return nil
	}
	c := &metav1.Condition{Type: ConditionLoRAAdaptersLoaded}
	switch {
	case len(failures) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonAdapterLoadFailed, strings.Join(failures, "; ")
	case len(waiting) > 0:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, ReasonWaitingForPods, strings.Join(waiting, "; ")
	default:
		c.Status, c.Reason, c.Message = metav1.ConditionTrue, ReasonAdaptersLoaded, fmt.Sprintf("every adapter is loaded on the %d Ready engines that serve it", engines)
	}
	return c
}

// syncPodAdapters compares one engine's adapters (GET /v1/models) with the backend's and
// loads or unloads the difference through vLLM's LoRA API.
func (r *Reconciler) syncPodAdapters(ctx context.Context, mb *workloadv1alpha1.ModelBooster, b *workloadv1alpha1.ModelBackend, p *corev1.Pod) error {
	base := "http://" + net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(podEnginePort(p, EnginePort(b.Type)))))
	loaded, err := r.loadedAdapters(ctx, base)
	if err != nil {
		return err
	}
	var errs []error
	for _, a := range b.LoraAdapters {
		if slices.Contains(loaded, a.Name) {
			continue
		}
		body := map[string]string{"lora_name": a.Name, "lora_path": LoRAAdapterPath(a.ArtifactURL)}
		status, msg, err := r.post(ctx, base+"/v1/load_lora_adapter", body)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("load %s: %w", a.Name, err))
		case status == http.StatusOK:
			r.event(mb, p, corev1.EventTypeNormal, ReasonLoaded, actionLoadAdapter, "loaded LoRA adapter %s into pod %s", a.Name, p.Name)
		case status == http.StatusBadRequest && strings.Contains(msg, "already"):
			// Loaded between our GET and POST (another pass, or the engine's own startup).
		default:
			errs = append(errs, fmt.Errorf("load %s: HTTP %d: %s", a.Name, status, msg))
		}
	}
	for _, name := range loaded {
		if slices.ContainsFunc(b.LoraAdapters, func(a workloadv1alpha1.LoraAdapter) bool { return a.Name == name }) {
			continue
		}
		status, msg, err := r.post(ctx, base+"/v1/unload_lora_adapter", map[string]string{"lora_name": name})
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("unload %s: %w", name, err))
		case status == http.StatusOK:
			r.event(mb, p, corev1.EventTypeNormal, ReasonUnloaded, actionUnloadAdapter, "unloaded LoRA adapter %s from pod %s: no longer in the spec", name, p.Name)
		case status == http.StatusNotFound:
		default:
			errs = append(errs, fmt.Errorf("unload %s: HTTP %d: %s", name, status, msg))
		}
	}
	return errors.Join(errs...)
}

// podEnginePort is the port of the pod's "http" container port (what the pod was created
// with, even while a rollout changes the template), else the type's engine port.
func podEnginePort(p *corev1.Pod, fallback int32) int32 {
	for _, c := range p.Spec.Containers {
		for _, port := range c.Ports {
			if port.Name == "http" && port.ContainerPort > 0 {
				return port.ContainerPort
			}
		}
	}
	return fallback
}

// loadedAdapters lists the adapters an engine serves: the /v1/models entries with a parent
// (vLLM lists an adapter with the base model as its parent).
func (r *Reconciler) loadedAdapters(ctx context.Context, base string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, loraHTTPTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.httpClient().Do(req)
	if err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("list models: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(string(raw)))
	}
	var models struct {
		Data []struct {
			ID     string  `json:"id"`
			Parent *string `json:"parent"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &models); err != nil {
		return nil, fmt.Errorf("list models: %w", err)
	}
	var out []string
	for _, m := range models.Data {
		if m.Parent != nil && *m.Parent != "" {
			out = append(out, m.ID)
		}
	}
	return out, nil
}

// post sends a JSON body and returns the status and the (short) response text.
func (r *Reconciler) post(ctx context.Context, url string, body any) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, loraHTTPTimeout)
	defer cancel()
	raw, err := json.Marshal(body)
	if err != nil {
		return 0, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.httpClient().Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode, strings.TrimSpace(string(msg)), nil
}

func (r *Reconciler) httpClient() *http.Client {
	if r.HTTPClient != nil {
		return r.HTTPClient
	}
	return &http.Client{Timeout: loraHTTPTimeout}
}
