package auth

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/lease"
)

// Keys of the authorizer context that API Gateway passes to the route
// functions (requestContext.authorizer.lambda).
const (
	ContextAgentID   = "agent_id"
	ContextAgentName = "agent_name"
	ContextAdmin     = "admin"
)

// Authorizer is the Lambda authorizer of the HTTP API (payload format 2.0,
// simple responses). A missing, malformed, unknown or revoked key is denied
// (IsAuthorized false). When the key cannot be checked at all the handler
// returns ErrInternal: API Gateway answers 500 and caches nothing, where a
// denial would lock a good key out for the cache time.
func Authorizer(a Authenticator) func(ctx context.Context, req events.APIGatewayV2CustomAuthorizerV2Request) (events.APIGatewayV2CustomAuthorizerSimpleResponse, error) {
	return func(ctx context.Context, req events.APIGatewayV2CustomAuthorizerV2Request) (events.APIGatewayV2CustomAuthorizerSimpleResponse, error) {
		deny := events.APIGatewayV2CustomAuthorizerSimpleResponse{IsAuthorized: false}
		key, ok := BearerKey(authorizationHeader(req))
		if !ok {
			return deny, nil
		}
		p, err := a.Authenticate(ctx, key)
		switch {
		case errors.Is(err, lease.ErrUnauthorized):
			return deny, nil
		case err != nil:
			return deny, ErrInternal
		}
		return events.APIGatewayV2CustomAuthorizerSimpleResponse{
			IsAuthorized: true,
			Context: map[string]interface{}{
				ContextAgentID:   p.AgentID,
				ContextAgentName: p.Name,
				ContextAdmin:     strconv.FormatBool(p.Admin),
			},
		}, nil
	}
}

// authorizationHeader finds the Authorization header (API Gateway lowercases
// header names in payload 2.0), falling back to the identity source.
func authorizationHeader(req events.APIGatewayV2CustomAuthorizerV2Request) string {
	for k, v := range req.Headers {
		if strings.EqualFold(k, "Authorization") {
			return v
		}
	}
	for _, v := range req.IdentitySource {
		if v != "" {
			return v
		}
	}
	return ""
}

// PrincipalFromAuthorizerContext reads back the principal that Authorizer
// put in the context. It accepts "admin" as a string or a bool, and refuses a
// context without a valid agent id.
func PrincipalFromAuthorizerContext(m map[string]interface{}) (lease.Principal, bool) {
	id, _ := m[ContextAgentID].(string)
	if !lease.ValidID(id) {
		return lease.Principal{}, false
	}
	name, _ := m[ContextAgentName].(string)
	var admin bool
	switch v := m[ContextAdmin].(type) {
	case bool:
		admin = v
	case string:
		b, err := strconv.ParseBool(v)
		if err != nil {
			return lease.Principal{}, false
		}
		admin = b
	case nil:
	default:
		return lease.Principal{}, false
	}
	return lease.Principal{AgentID: id, Name: name, Admin: admin}, true
}
