-- check_access: try every command the scripts run, on keys no queue uses, so
-- that a Redis user without one of them is told so when a client starts, not
-- at its first message.
--
-- KEYS[1] stats (hash): of the probe name, never a queue's
-- KEYS[2] visible (list): of the probe name
-- KEYS[3] inflight (zset): of the probe name
-- KEYS[4] events (stream): of the probe name
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): unused, kept for uniformity
-- ARGV[2] wake_channel (string): the probe's channel (nobody listens on it)
--
-- Leaves no key behind. Returns {OK} or {E_BAD_ARGUMENT, '<COMMAND>: <error>'}
-- for the first command the user may not run. The first command writes: Redis
-- refuses a script's writes for its own state (OOM, MISCONF, READONLY,
-- NOREPLICAS) only until the script has written, so such a refusal comes at
-- HSET, with nothing written, in the same form; the client tells a refusal
-- from a missing permission (NOPERM) by its text.
local stats = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local events = KEYS[4]
local h, l, z, s = stats, visible, inflight, events
local tries = {
  {'HSET', h, 'f', '1'}, {'HGET', h, 'f'}, {'HMGET', h, 'f'}, {'HGETALL', h}, {'HEXISTS', h, 'f'},
  {'HINCRBY', h, 'f', 1}, {'HLEN', h}, {'HDEL', h, 'f'},
  {'RPUSH', l, 'x'}, {'LPUSH', l, 'x'}, {'LLEN', l}, {'LRANGE', l, 0, 0}, {'LSET', l, 0, 'x'}, {'LPOP', l, 2},
  {'ZADD', z, 1, 'x'}, {'ZSCORE', z, 'x'}, {'ZMSCORE', z, 'x'}, {'ZCARD', z}, {'ZCOUNT', z, '-inf', '+inf'},
  {'ZRANGE', z, 0, 0}, {'ZRANGEBYSCORE', z, '-inf', '+inf'}, {'ZRANGEBYLEX', z, '-', '+'}, {'ZREM', z, 'x'},
  {'XADD', s, 'MAXLEN', 1, '*', 'k', 'v'}, {'EXISTS', s}, {'TIME'}, {'PUBLISH', ARGV[2], '0'},
  {'DEL', s}, {'SET', s, '1', 'PX', 1000}, {'GET', s}, {'UNLINK', h, l, z, s},
}
for i = 1, #tries do
  local reply = redis.pcall(unpack(tries[i]))
  if type(reply) == 'table' and reply.err then
    return fail(E_BAD_ARGUMENT, tries[i][1] .. ': ' .. reply.err)
  end
end
return {OK}
