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
// simple responses). A valid key is authorized with the agent's id, name and
// role in the context. A malformed, unknown or revoked key is also let
// through, with an empty context: API Gateway would otherwise answer a denial
// with its own 403 {"message":"Forbidden"}, where the contract is 401
// unauthorized with the error body, which the route function then gives
// because it finds no agent in the context. (A request with no Authorization
// header at all never reaches the authorizer: API Gateway refuses it with 401
// {"message":"Unauthorized"}.) When the key cannot be checked at all the
// handler returns ErrInternal: API Gateway answers 500 and caches nothing,
// where an answer would lock a good key out for the cache time.
func Authorizer(a Authenticator) func(ctx context.Context, req events.APIGatewayV2CustomAuthorizerV2Request) (events.APIGatewayV2CustomAuthorizerSimpleResponse, error) {
	return func(ctx context.Context, req events.APIGatewayV2CustomAuthorizerV2Request) (events.APIGatewayV2CustomAuthorizerSimpleResponse, error) {
		// Let through without an agent: the route function answers 401.
		anonymous := events.APIGatewayV2CustomAuthorizerSimpleResponse{IsAuthorized: true}
		key, ok := BearerKey(authorizationHeader(req))
		if !ok {
			return anonymous, nil
		}
		p, err := a.Authenticate(ctx, key)
		switch {
		case errors.Is(err, lease.ErrUnauthorized):
			return anonymous, nil
		case err != nil:
			return events.APIGatewayV2CustomAuthorizerSimpleResponse{}, ErrInternal
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
