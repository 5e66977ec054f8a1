-- send: store 1 to 10 messages, visible at once or delayed; a message with a
-- deduplication id is stored once per id within 5 minutes (an smq extension
-- for standard queues: idempotent producers such as the Spark sink).
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping
-- KEYS[2] visible (list): visible messages (sends join the tail): in layout 2
--         "<id>|<record>", the record inline; in layout 1 ids
-- KEYS[3] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[4] messages (hash): id -> record "<sent_ms>|<payload>" (delayed messages;
--         in layout 1 every message)
-- KEYS[5] stats (hash): counters
-- KEYS[6] events (stream): lifecycle events
-- KEYS[7] dedup (hash): deduplication id -> id of the message it let in
-- KEYS[8] dedup_at (zset): deduplication ids by when they lapse (ms)
-- KEYS[9] tenants (hash): fair queues: " s <group>" -> when the group last sent (ms)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): clock override for tests
-- ARGV[2] wake_channel (string): Pub/Sub channel that wakes long polls
-- ARGV[3] count (1-10): number of messages
-- ARGV[4..] per message, 5 entries: id (string), delay_ms (0-900000, or -1
--           for the queue's delay), size (bytes, as SQS counts it), payload,
--           deduplication id ('' for none)
--
-- Returns {OK, status_1, id_1, ..., status_n, id_n}: OK (id: the new
-- message), DUPLICATE (id: the message the deduplication id let in) or
-- E_TOO_LONG (id: the queue's MaximumMessageSize) per message; or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local delayed = KEYS[3]
local messages = KEYS[4]
local stats = KEYS[5]
local events = KEYS[6]
local dedup = KEYS[7]
local dedup_at = KEYS[8]
local tenants = KEYS[9]
local now = clock(ARGV[1])
local wake_channel = ARGV[2]
local count = int_arg(ARGV[3], 1, 10)

if count == nil or #ARGV ~= 3 + 5 * count then
  return fail(E_BAD_ARGUMENT, 'send takes 1 to 10 messages of 5 arguments')
end
local settings = redis.call('HMGET', meta, 'delay_ms', 'max_size', 'events_max', 'layout', 'fair')
if settings[1] == false then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[4]) then
  return fail(E_LAYOUT, settings[4])
end
local queue_delay = tonumber(settings[1])
local max_size = tonumber(settings[2])
local events_max = tonumber(settings[3]) or 0
local inline = takes_inline(settings[4])

-- Validate every entry before the first write (inline: this loop runs once a message).
local delays = {}
local deduplicating = false
local too_long = false
-- A payload with a group starts "f": the queue becomes fair (see includes/common.lua).
local grouped = false
for i = 1, count do
  local base = 5 * i - 1
  local delay, size = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  if delay == nil or size == nil or delay % 1 ~= 0 or size % 1 ~= 0 or delay < -1 or delay > 900000
      or size < 0 or size > 1073741824 then
    return fail(E_BAD_ARGUMENT, 'bad delay or size for message ' .. i)
  end
  if delay < 0 then
    delay = queue_delay
  end
  delays[i] = delay
  if size > max_size then
    too_long = true
  end
  if ARGV[base + 4] ~= '' then
    deduplicating = true
  end
  -- An attribute length starts with a digit, below 'f'; "f0:" is a deduplication id alone.
  if ARGV[base + 3] >= 'f' and string.byte(ARGV[base + 3], 2) ~= 48 then
    grouped = true
  end
end

local reply = {OK}
local records = {}
local now_visible = {}
local sent, duplicates = 0, 0
local evented = events_max > 0
-- Each record starts with the send time: formatted once, not once a message.
local stamp = now .. '|'
if not (deduplicating or too_long or evented) then
  -- The common batch: every message stored, no per-message branch but the delay.
  for i = 1, count do
    local base = 5 * i - 1
    local id = ARGV[base]
    reply[2 * i], reply[2 * i + 1] = OK, id
    if delays[i] > 0 then
      records[#records + 1] = id
      records[#records + 1] = stamp .. ARGV[base + 3]
      redis.call('ZADD', delayed, now + delays[i], id)
    elseif inline then
      now_visible[#now_visible + 1] = id .. '|' .. stamp .. ARGV[base + 3]
    else
      records[#records + 1] = id
      records[#records + 1] = stamp .. ARGV[base + 3]
      now_visible[#now_visible + 1] = id
    end
  end
  sent = count
else
  if deduplicating then
    trim_dedup(dedup, dedup_at, now)
  end
  for i = 1, count do
    local base = 5 * i - 1
    local id = ARGV[base]
    local key = ARGV[base + 4]
    local first = false
    if key ~= '' then
      first = redis.call('HGET', dedup, key)
    end
    if tonumber(ARGV[base + 2]) > max_size then
      reply[#reply + 1] = E_TOO_LONG
      reply[#reply + 1] = max_size
    elseif first then
      reply[#reply + 1] = DUPLICATE
      reply[#reply + 1] = first
      duplicates = duplicates + 1
    else
      if key ~= '' then
        remember_dedup(dedup, dedup_at, now, key, id)
      end
      reply[#reply + 1] = OK
      reply[#reply + 1] = id
      if delays[i] > 0 then
        records[#records + 1] = id
        records[#records + 1] = stamp .. ARGV[base + 3]
        redis.call('ZADD', delayed, now + delays[i], id)
      elseif inline then
        now_visible[#now_visible + 1] = id .. '|' .. stamp .. ARGV[base + 3]
      else
        records[#records + 1] = id
        records[#records + 1] = stamp .. ARGV[base + 3]
        now_visible[#now_visible + 1] = id
      end
      sent = sent + 1
      if evented then
        emit(events, events_max, now, 'sent', id, 0, delays[i])
      end
    end
  end
end

if #records > 0 then
  redis.call('HSET', messages, unpack(records))
end
if sent > 0 then
  redis.call('HINCRBY', stats, 'sent', sent)
  if grouped then
    if settings[5] ~= '1' then
      redis.call('HSET', meta, 'fair', '1')
    end
    -- When each group last sent: a noisy group quiet for SENT_QUIET_MS is noisy no more.
    local last = {}
    for i = 1, count do
      local group = group_at(ARGV[5 * i + 2], 1)
      if group then
        last[#last + 1] = ' s ' .. group
        last[#last + 1] = now
      end
    end
    redis.call('HSET', tenants, unpack(last))
  end
end
if duplicates > 0 then
  redis.call('HINCRBY', stats, 'deduplicated', duplicates)
end
if #now_visible > 0 then
  redis.call('RPUSH', visible, unpack(now_visible))
end
if sent > 0 then
  -- Long polls wake: to receive, or to sleep until a new, sooner delay.
  redis.call('PUBLISH', wake_channel, '1')
end
return reply
