package kafka

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	signer "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/aws_msk_iam_v2"
)

const mechAWSMSKIAM = "AWS_MSK_IAM"

// mskIAM is AWS_MSK_IAM: kafka-go's aws_msk_iam_v2 signs, per connection, a SigV4 presigned
// kafka-cluster:Connect request for the broker's host with credentials from the standard
// chain, which the SDK caches and refreshes before they expire. This wrapper only says which
// step failed, since the SDK's "failed to refresh cached credentials" names no setting.
// Safe for concurrent use.
type mskIAM struct {
	inner *aws_msk_iam_v2.Mechanism
}

// newMSKIAM loads the standard AWS configuration (environment and shared files; no network:
// credentials are fetched at the first handshake). region overrides the configured one.
func newMSKIAM(ctx context.Context, region string) (*mskIAM, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if region != "" {
		opts = append(opts, awsconfig.WithRegion(region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("sasl AWS_MSK_IAM: the standard AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, fmt.Errorf("sasl AWS_MSK_IAM: no AWS region; set sasl.region to the MSK cluster's region (or AWS_REGION)")
	}
	return newMSKIAMWith(cfg.Credentials, cfg.Region), nil
}

func newMSKIAMWith(creds aws.CredentialsProvider, region string) *mskIAM {
	return &mskIAM{inner: &aws_msk_iam_v2.Mechanism{Signer: signer.NewSigner(), Credentials: creds, Region: region}}
}

func (m *mskIAM) Name() string { return mechAWSMSKIAM }

func (m *mskIAM) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	if _, err := m.inner.Credentials.Retrieve(ctx); err != nil {
		return nil, nil, fmt.Errorf("AWS_MSK_IAM: no AWS credentials from the standard chain (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, AWS_WEB_IDENTITY_TOKEN_FILE, a container or instance role): %w", err)
	}
	sm, ir, err := m.inner.Start(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("AWS_MSK_IAM: signing: %w", err)
	}
	return sm, ir, nil
}
