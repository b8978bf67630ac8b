package stream

import (
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// image turns an item image of a Lambda DynamoDB event into the SDK's form,
// which the lease store decodes.
func image(m map[string]events.DynamoDBAttributeValue) (map[string]ddb.AttributeValue, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]ddb.AttributeValue, len(m))
	for k, v := range m {
		av, err := attr(v)
		if err != nil {
			return nil, fmt.Errorf("attribute %s: %w", k, err)
		}
		out[k] = av
	}
	return out, nil
}

func attr(v events.DynamoDBAttributeValue) (ddb.AttributeValue, error) {
	switch v.DataType() {
	case events.DataTypeString:
		return &ddb.AttributeValueMemberS{Value: v.String()}, nil
	case events.DataTypeNumber:
		return &ddb.AttributeValueMemberN{Value: v.Number()}, nil
	case events.DataTypeBinary:
		return &ddb.AttributeValueMemberB{Value: v.Binary()}, nil
	case events.DataTypeBoolean:
		return &ddb.AttributeValueMemberBOOL{Value: v.Boolean()}, nil
	case events.DataTypeNull:
		return &ddb.AttributeValueMemberNULL{Value: true}, nil
	case events.DataTypeStringSet:
		return &ddb.AttributeValueMemberSS{Value: v.StringSet()}, nil
	case events.DataTypeNumberSet:
		return &ddb.AttributeValueMemberNS{Value: v.NumberSet()}, nil
	case events.DataTypeBinarySet:
		return &ddb.AttributeValueMemberBS{Value: v.BinarySet()}, nil
	case events.DataTypeList:
		var l []ddb.AttributeValue
		for _, e := range v.List() {
			av, err := attr(e)
			if err != nil {
				return nil, err
			}
			l = append(l, av)
		}
		return &ddb.AttributeValueMemberL{Value: l}, nil
	case events.DataTypeMap:
		m, err := image(v.Map())
		if err != nil {
			return nil, err
		}
		return &ddb.AttributeValueMemberM{Value: m}, nil
	}
	return nil, fmt.Errorf("unknown attribute type %v", v.DataType())
}

// eventImage turns an item image of a DynamoDB Streams record, as the
// Streams API returns it, into a Lambda event's, as the event source
// mapping hands it to a function.
func eventImage(m map[string]streamtypes.AttributeValue) map[string]events.DynamoDBAttributeValue {
	if m == nil {
		return nil
	}
	out := make(map[string]events.DynamoDBAttributeValue, len(m))
	for k, v := range m {
		out[k] = eventAttr(v)
	}
	return out
}

func eventAttr(v streamtypes.AttributeValue) events.DynamoDBAttributeValue {
	switch v := v.(type) {
	case *streamtypes.AttributeValueMemberS:
		return events.NewStringAttribute(v.Value)
	case *streamtypes.AttributeValueMemberN:
		return events.NewNumberAttribute(v.Value)
	case *streamtypes.AttributeValueMemberB:
		return events.NewBinaryAttribute(v.Value)
	case *streamtypes.AttributeValueMemberBOOL:
		return events.NewBooleanAttribute(v.Value)
	case *streamtypes.AttributeValueMemberSS:
		return events.NewStringSetAttribute(v.Value)
	case *streamtypes.AttributeValueMemberNS:
		return events.NewNumberSetAttribute(v.Value)
	case *streamtypes.AttributeValueMemberBS:
		return events.NewBinarySetAttribute(v.Value)
	case *streamtypes.AttributeValueMemberL:
		l := make([]events.DynamoDBAttributeValue, len(v.Value))
		for i, e := range v.Value {
			l[i] = eventAttr(e)
		}
		return events.NewListAttribute(l)
	case *streamtypes.AttributeValueMemberM:
		return events.NewMapAttribute(eventImage(v.Value))
	}
	return events.NewNullAttribute()
}
