package v1alpha1

import "fmt"

// ServingGroupName is ServingGroup i of ModelServing ms: "<ms>-<i>". It names the group's
// Volcano PodGroup and is the value of its pods' GroupNameLabel.
func ServingGroupName(ms string, i int) string { return fmt.Sprintf("%s-%d", ms, i) }
