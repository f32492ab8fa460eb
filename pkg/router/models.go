package router

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// serveModel answers GET /v1/models/{id} from the router's view, as OpenAI's retrieve-model
// call: the model when a ModelRoute of the router's own serves it, else a 404 in OpenAI's
// error shape (model_not_found). Model names may hold slashes (org/model), so id is the
// rest of the path.
func (r *Router) serveModel(w http.ResponseWriter, req *http.Request) {
	id := req.PathValue("id")
	if _, found := slices.BinarySearch(r.view.Snapshot().Routes.Models(), id); !found {
		writeError(w, http.StatusNotFound, "model_not_found", "model", fmt.Sprintf("The model `%s` does not exist: no ModelRoute serves it.", id))
		return
	}
	b, _ := json.Marshal(struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}{ID: id, Object: "model", OwnedBy: "berth"})
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(b, '\n'))
}
