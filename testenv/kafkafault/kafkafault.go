// Package kafkafault builds the broker answers that tests and the chaos harness inject into kfake
// (franz-go's in-process Kafka) through its request interception.
package kafkafault

import "github.com/twmb/franz-go/pkg/kmsg"

// ProduceError answers req with code as the error of every partition it names, storing
// nothing. Topics are echoed by name and by ID (newer produce versions name them by ID). Pure.
func ProduceError(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	resp.Version = req.Version
	for _, t := range req.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		for _, p := range t.Partitions {
			rp := kmsg.NewProduceResponseTopicPartition()
			rp.Partition = p.Partition
			rp.ErrorCode = code
			rp.BaseOffset = -1
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}
