package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/hardware"
	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/gangway/gangway/internal/inference/promtext"
)

// scrapeResult is what one engine's /metrics said.
type scrapeResult struct {
	load     EngineLoad
	capacity *Capacity // nil when the metrics do not size the replica
}

// scraped is which metrics scrapeMetrics reads.
var scraped = map[string]bool{
	"vllm:num_requests_running": true, "vllm:num_requests_waiting": true, "vllm:kv_cache_usage_perc": true,
	"vllm:gpu_cache_usage_perc": true, "vllm:cache_config_info": true, "gangway:engine_info": true,
}

// scrapeMetrics reads an engine's /metrics.
func scrapeMetrics(ctx context.Context, c *http.Client, base string) (scrapeResult, error) {
	var res scrapeResult
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+openai.PathMetrics, nil)
	if err != nil {
		return res, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return res, fmt.Errorf("scrape %s: %w", base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return res, fmt.Errorf("scrape %s: status %d", base, resp.StatusCode)
	}
	samples, err := promtext.ParseOnly(io.LimitReader(resp.Body, 8<<20), scraped)
	if err != nil {
		return res, fmt.Errorf("scrape %s: %w", base, err)
	}
	res.load.At = time.Now()
	var blocks, blockSize int
	var info *promtext.Sample
	for i, s := range samples {
		switch s.Name {
		case "vllm:num_requests_running":
			res.load.Running = int(s.Value)
		case "vllm:num_requests_waiting":
			res.load.Waiting = int(s.Value)
		case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc":
			res.load.KVUsage = s.Value
		case "vllm:cache_config_info":
			blocks, _ = strconv.Atoi(s.Label("num_gpu_blocks"))
			blockSize, _ = strconv.Atoi(s.Label("block_size"))
		case "gangway:engine_info":
			info = &samples[i]
		}
	}
	if info != nil {
		tp, _ := strconv.Atoi(info.Label("tp"))
		if cfg, err := hardware.NewConfig(info.Label("model"), info.Label("gpu"), tp, info.Label("quant")); err == nil {
			cp := CapacityFromConfig(cfg)
			res.capacity = &cp
		}
	}
	if res.capacity == nil && blocks > 0 && blockSize > 0 {
		cp := DefaultCapacity
		cp.Engine = nil
		cp.KVTokens = int64(blocks) * int64(blockSize)
		res.capacity = &cp
	}
	return res, nil
}

// discoverModel asks an engine's /v1/models for the model it serves.
func discoverModel(ctx context.Context, c *http.Client, base string) (openai.Model, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+openai.PathModels, nil)
	if err != nil {
		return openai.Model{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return openai.Model{}, fmt.Errorf("list models of %s: %w", base, err)
	}
	defer resp.Body.Close()
	var body openai.ModelList
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&body); err != nil {
		return openai.Model{}, fmt.Errorf("list models of %s: %w", base, err)
	}
	if len(body.Data) == 0 || body.Data[0].ID == "" {
		return openai.Model{}, fmt.Errorf("list models of %s: none served", base)
	}
	return body.Data[0], nil
}
