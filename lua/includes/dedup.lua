-- Deduplication ids: a hash of key -> what the first send let in, and a
-- sorted set of the keys by when they lapse, trimmed a few at a time.
local DEDUP_MS = 300000
local DEDUP_TRIM_MAX = 100

local function trim_dedup(dedup, dedup_at, now)
  local lapsed = redis.call('ZRANGEBYSCORE', dedup_at, '-inf', now, 'LIMIT', 0, DEDUP_TRIM_MAX)
  if #lapsed > 0 then
    redis.call('ZREM', dedup_at, unpack(lapsed))
    redis.call('HDEL', dedup, unpack(lapsed))
  end
end

local function remember_dedup(dedup, dedup_at, now, key, value)
  redis.call('HSET', dedup, key, value)
  redis.call('ZADD', dedup_at, now + DEDUP_MS, key)
end
