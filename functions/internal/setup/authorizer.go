package setup

// The Lambda authorizer's handler: a key's agent, or a refusal that is
// counted.

import (
	"context"
	"log/slog"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/deploy"
)

// AuthorizerHandler is the Lambda authorizer's handler type.
type AuthorizerHandler = func(context.Context, events.APIGatewayV2CustomAuthorizerV2Request) (events.APIGatewayV2CustomAuthorizerSimpleResponse, error)

// KeyAuthorizer is auth.Authorizer with one log line per decision (API Gateway
// caches each decision for its TTL, so this is one line per key per TTL at
// most) and the count of keys it did not know. The key itself is never
// logged.
func KeyAuthorizer(a auth.Authenticator, e Env, log *slog.Logger) AuthorizerHandler {
	next := auth.Authorizer(a)
	m := e.metrics()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return func(ctx context.Context, req events.APIGatewayV2CustomAuthorizerV2Request) (events.APIGatewayV2CustomAuthorizerSimpleResponse, error) {
		resp, err := next(ctx, req)
		attrs := []slog.Attr{
			slog.String("route", req.RouteKey),
			slog.String("request_id", req.RequestContext.RequestID),
			slog.String("source_ip", req.RequestContext.HTTP.SourceIP),
		}
		switch id, _ := resp.Context[auth.ContextAgentID].(string); {
		case err != nil:
			log.LogAttrs(ctx, slog.LevelError, "authorizer could not check the key", append(attrs, slog.String("error", err.Error()))...)
		case id != "":
			log.LogAttrs(ctx, slog.LevelInfo, "key accepted", append(attrs, slog.String("agent_id", id))...)
		default:
			reason := "unknown or revoked key"
			if _, ok := auth.BearerKey(authorization(req)); !ok {
				reason = "malformed Authorization header"
			}
			m.Emit(ctx, slog.LevelInfo, "key refused", []Metric{count(deploy.MetricUnauthorized)},
				append(attrs, slog.String("reason", reason))...)
		}
		return resp, err
	}
}

func authorization(req events.APIGatewayV2CustomAuthorizerV2Request) string {
	for k, v := range req.Headers {
		if strings.EqualFold(k, "Authorization") {
			return v
		}
	}
	if len(req.IdentitySource) > 0 {
		return req.IdentitySource[0]
	}
	return ""
}
