package rocketmq

import (
	"testing"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/outboxd/outboxd/internal/rmqprops"
)

// TestSystemPropertiesMatchClient holds rmqprops, which spells the client's property names
// out so that config need not import the client, to the client's own constants: a header
// named like one of them must never be sent as a user property.
func TestSystemPropertiesMatchClient(t *testing.T) {
	if rmqprops.ShardingKey != primitive.PropertyShardingKey {
		t.Errorf("rmqprops.ShardingKey = %q, the client's is %q", rmqprops.ShardingKey, primitive.PropertyShardingKey)
	}
	for _, name := range []string{
		primitive.PropertyKeys, primitive.PropertyTags, primitive.PropertyWaitStoreMsgOk,
		primitive.PropertyDelayTimeLevel, primitive.PropertyRetryTopic, primitive.PropertyTimerDeliverMS,
		primitive.PropertyRealTopic, primitive.PropertyRealQueueId, primitive.PropertyTransactionPrepared,
		primitive.PropertyProducerGroup, primitive.PropertyMinOffset, primitive.PropertyMaxOffset,
		primitive.PropertyBuyerId, primitive.PropertyOriginMessageId, primitive.PropertyTransferFlag,
		primitive.PropertyCorrectionFlag, primitive.PropertyMQ2Flag, primitive.PropertyReconsumeTime,
		primitive.PropertyMsgRegion, primitive.PropertyTraceSwitch, primitive.PropertyUniqueClientMessageIdKeyIndex,
		primitive.PropertyMaxReconsumeTimes, primitive.PropertyConsumeStartTime,
		primitive.PropertyTranscationPreparedQueueOffset, primitive.PropertyTranscationCheckTimes,
		primitive.PropertyCheckImmunityTimeInSeconds, primitive.PropertyShardingKey,
		primitive.PropertyTransactionID, primitive.PropertyCorrelationID, primitive.PropertyMessageReplyToClient,
		primitive.PropertyMessageTTL, primitive.PropertyReplyMessageArriveTime, primitive.PropertyMsgType,
		primitive.PropertyCluster,
	} {
		if !rmqprops.IsSystem(name) {
			t.Errorf("rmqprops.IsSystem(%q) = false; the client defines it as a property", name)
		}
	}
}
