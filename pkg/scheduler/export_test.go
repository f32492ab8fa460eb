package scheduler

import "context"

// Build builds the scheduler from o's configuration with every plugin of its profiles, and
// releases it without scheduling anything: for tests of configurations.
func Build(ctx context.Context, o Options) error {
	_, _, release, err := setup(ctx, o)
	if err == nil {
		release()
	}
	return err
}
