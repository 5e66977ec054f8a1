-- send_fifo: store 1 to 10 messages in a FIFO queue, each behind the earlier
-- messages of its group, once per deduplication id within 5 minutes.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping (fifo_seq: last sequence number)
-- KEYS[2] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[3] stats (hash): counters
-- KEYS[4] events (stream): lifecycle events
-- KEYS[5] fifo (hash): id -> "<group> <seq> <sent_ms>"
-- KEYS[6] ordered (zset): "<group> <seq> <id>", score 0: each group's messages in order
-- KEYS[7] groups (hash): group -> 'r' | 'w' | messages in flight
-- KEYS[8] ready (list): groups whose head may be received
-- KEYS[9] waiting (zset): groups whose head is delayed, by the head's sent_ms
-- KEYS[10] delayed (zset): ids sent while the queue had a delay, by sent_ms
-- KEYS[11] dedup (hash): deduplication key -> "<id> <seq>" of the message it let in
-- KEYS[12] dedup_at (zset): deduplication keys by when they lapse (ms)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] wake_channel (string): Pub/Sub channel that wakes long polls
-- ARGV[3] count (1-10): number of messages
-- ARGV[4..] per message, 6 entries: id (string), size (bytes, as SQS counts
--           it), payload (with its FIFO header), group (1-128 printable ASCII,
--           no space), deduplication id ('' for none), SHA-256 of the body (hex)
--
-- The deduplication id is the one given, else the body's SHA-256 when the
-- queue has content-based deduplication; with scope messageGroup it counts
-- within its group only. The queue's DelaySeconds applies (FIFO queues take
-- no per-message delay).
-- Returns {OK, [status, id, seq] * n}: status OK (stored), E_TOO_LONG (seq:
-- the queue's MaximumMessageSize), or DUPLICATE (accepted, not stored again: id and seq
-- are those of the message that id let in); or {E_QUEUE_MISSING | E_BAD_ARGUMENT |
-- E_NO_DEDUPLICATION_ID (no id, no content-based deduplication: nothing sent), detail}.
local meta = KEYS[1]
local messages = KEYS[2]
local stats = KEYS[3]
local events = KEYS[4]
local fifo = KEYS[5]
local ordered = KEYS[6]
local groups = KEYS[7]
local ready = KEYS[8]
local waiting = KEYS[9]
local delayed = KEYS[10]
local dedup = KEYS[11]
local dedup_at = KEYS[12]
local k = {meta = meta, fifo = fifo, ordered = ordered, groups = groups,
  ready = ready, waiting = waiting, delayed = delayed}
local now = clock(ARGV[1])
local wake_channel = ARGV[2]
local count = int_arg(ARGV[3], 1, 10)

local MAX_DELAY_MS = 900000
local TRIM_MAX = 100

if count == nil or #ARGV ~= 3 + 6 * count then
  return fail(E_BAD_ARGUMENT, 'send_fifo takes 1 to 10 messages of 6 arguments')
end
for i = 1, count do
  local base = 6 * i - 2
  local group = ARGV[base + 3]
  if int_arg(ARGV[base + 1], 0, 1073741824) == nil or not string.match(group, '^[!-~]+$') or
     #group > 128 or ARGV[base + 5] == '' then
    return fail(E_BAD_ARGUMENT, 'bad size, group or body digest for message ' .. i)
  end
end
local settings = redis.call('HMGET', meta, 'delay_ms', 'max_size', 'events_max', 'fifo',
  'content_dedup', 'dedup_scope', 'dedup_by', 'layout')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[8]) then
  return fail(E_LAYOUT, settings[8])
end
if settings[4] ~= '1' then
  return fail(E_BAD_ARGUMENT, 'not a FIFO queue')
end
local delay_ms = tonumber(settings[1])
local max_size = tonumber(settings[2])
local events_max = tonumber(settings[3]) or 0
local content_dedup = settings[5] == '1'
-- The scope the queue was created with (dedup_by, kept when DeduplicationScope changed).
local per_group = (settings[7] or settings[6]) == 'messageGroup'
if not content_dedup then
  -- As SQS: a message without a deduplication id fails the whole request.
  for i = 1, count do
    if ARGV[6 * i + 2] == '' then
      return fail(E_NO_DEDUPLICATION_ID, i)
    end
  end
end

-- Deduplication keys and delay marks that lapsed: a few per call.
trim_dedup(dedup, dedup_at, now)
local old_marks = redis.call('ZRANGEBYSCORE', k.delayed, '-inf', now - MAX_DELAY_MS, 'LIMIT', 0, TRIM_MAX)
if #old_marks > 0 then
  redis.call('ZREM', k.delayed, unpack(old_marks))
end

local reply = {OK}
local sent, duplicates = 0, 0
for i = 1, count do
  local base = 6 * i - 2
  local id = ARGV[base]
  local group = ARGV[base + 3]
  local key = ARGV[base + 4]
  if key == '' and content_dedup then
    key = ARGV[base + 5]
  end
  local first = false
  if key ~= '' then
    -- Ids stored under the other form (by earlier clients, which applied a scope
    -- switch) keep deduplicating until their window lapses: look under both forms,
    -- store under the queue's own.
    local grouped = group .. ' ' .. key
    first = redis.call('HGET', dedup, key) or redis.call('HGET', dedup, grouped)
    if per_group then
      key = grouped
    end
  end
  if tonumber(ARGV[base + 1]) > max_size then
    reply[#reply + 1] = E_TOO_LONG
    reply[#reply + 1] = id
    reply[#reply + 1] = max_size
  elseif first then
    local first_id, first_seq = string.match(first, '^(%S+) (%S+)$')
    reply[#reply + 1] = DUPLICATE
    reply[#reply + 1] = first_id
    reply[#reply + 1] = first_seq
    duplicates = duplicates + 1
  else
    redis.call('HSET', messages, id, now .. '|' .. ARGV[base + 2])
    local seq = fifo_add(k, id, group, now, now, delay_ms)
    remember_dedup(dedup, dedup_at, now, key, id .. ' ' .. seq)
    reply[#reply + 1] = OK
    reply[#reply + 1] = id
    reply[#reply + 1] = seq
    sent = sent + 1
    emit(events, events_max, now, 'sent', id, 0, delay_ms)
  end
end

if sent > 0 then
  redis.call('HINCRBY', stats, 'sent', sent)
  redis.call('PUBLISH', wake_channel, '1')
end
if duplicates > 0 then
  redis.call('HINCRBY', stats, 'deduplicated', duplicates)
end
return reply
