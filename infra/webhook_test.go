package main

import (
	"github.com/checkout-dev/checkout/deploy"

	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
)

// With webhookUrls and webhookSecretName the notices function, and only it,
// gets the webhook settings, the key as a deploy-time reference to Secrets
// Manager (never the key itself), and a timeout that covers a receiver's
// retries; without them nothing changes.
func TestWebhookContext(t *testing.T) {
	s := synth(t, map[string]any{"webhookUrls": "https://hooks.example.com/checkout, https://b.example.com/x", "webhookSecretName": "checkout/webhook"})
	for name, id := range s.fnID {
		props := s.resources[id]["Properties"].(map[string]any)
		env := props["Environment"].(map[string]any)["Variables"].(map[string]any)
		url, hasURL := env[EnvWebhookURL]
		secret, hasSecret := env[EnvWebhookSecret]
		if name != deploy.Notices {
			if hasURL || hasSecret {
				t.Errorf("function %s has the webhook settings", name)
			}
			continue
		}
		if url != "https://hooks.example.com/checkout,https://b.example.com/x" {
			t.Errorf("notices function's %s = %v", EnvWebhookURL, url)
		}
		if r := s.render(secret); !strings.Contains(r, "{{resolve:secretsmanager:") || !strings.Contains(r, "checkout/webhook") {
			t.Errorf("notices function's %s = %s, want a Secrets Manager reference", EnvWebhookSecret, r)
		}
		if props["Timeout"] != float64(streamWebhookTimeout) {
			t.Errorf("notices function's timeout %v with webhooks", props["Timeout"])
		}
	}

	// A rotated secret: its version is named in the reference, so that
	// the function changes and CloudFormation resolves the new key (a
	// deploy with an unchanged reference changes nothing and keeps the
	// old key).
	rotated := synth(t, map[string]any{"webhookUrls": "https://hooks.example.com/checkout", "webhookSecretName": "checkout/webhook", "webhookSecretVersion": "v-2f1e"})
	renv := rotated.resources[rotated.fnID[deploy.Notices]]["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
	if r := rotated.render(renv[EnvWebhookSecret]); !strings.Contains(r, "checkout/webhook") || !strings.Contains(r, "v-2f1e") {
		t.Errorf("a rotated secret's reference %s does not name its version", r)
	}

	plain := synth(t, nil)
	env := plain.resources[plain.fnID[deploy.Notices]]["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
	if _, ok := env[EnvWebhookURL]; ok {
		t.Error("webhook settings without the context")
	}

	for _, ctx := range []map[string]any{
		{"webhookUrls": "http://insecure.example.com"},
		{"webhookUrls": "https://ok.example.com"}, // no secret
		{"webhookUrls": "ftp://x", "webhookSecretName": "s"},
		{"webhookUrls": "https://ok.example.com", "webhookSecretVersion": "v-1"}, // a version of no secret
	} {
		app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
		if _, err := ConfigFromContext(app.Node()); err == nil {
			t.Errorf("context %v accepted", ctx)
		}
	}
}

// autoCreateTasks sets CHECKOUT_AUTO_CREATE_TASKS on the checkouts
// function, the only one that checks out (AWS had no way to turn on what
// API.md calls a server setting); without it, no function has it.
func TestAutoCreateTasksContext(t *testing.T) {
	for _, on := range []bool{true, false} {
		var ctx map[string]any
		if on {
			ctx = map[string]any{"autoCreateTasks": "true"}
		}
		s := synth(t, ctx)
		for name, id := range s.fnID {
			env := s.resources[id]["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
			v, has := env[EnvAutoCreateTasks]
			if want := on && name == deploy.Checkouts; has != want || has && v != "true" {
				t.Errorf("autoCreateTasks %v: function %s has %s = %v (set: %v)", on, name, EnvAutoCreateTasks, v, has)
			}
		}
	}
}

// sweepStay sets CHECKOUT_SWEEP_STAY on the sweeper alone; without it, no
// function has it (the sweeper's default applies). A stay the sweeper's
// timeout cannot hold, or no duration, is refused.
func TestSweepStayContext(t *testing.T) {
	for _, stay := range []string{"", "0s", "30s"} {
		var ctx map[string]any
		if stay != "" {
			ctx = map[string]any{"sweepStay": stay}
		}
		s := synth(t, ctx)
		for name, id := range s.fnID {
			env := s.resources[id]["Properties"].(map[string]any)["Environment"].(map[string]any)["Variables"].(map[string]any)
			v, has := env[EnvSweepStay]
			if want := stay != "" && name == deploy.Sweeper; has != want || has && v != stay {
				t.Errorf("sweepStay %q: function %s has %s = %v (set: %v)", stay, name, EnvSweepStay, v, has)
			}
		}
	}
	for _, bad := range []string{"56s", "-1s", "30", "soon"} {
		ctx := map[string]any{"sweepStay": bad}
		app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
		if _, err := ConfigFromContext(app.Node()); err == nil {
			t.Errorf("sweepStay %q accepted", bad)
		}
	}
}
