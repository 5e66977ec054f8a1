-- peek: list up to 100 messages in one state without receiving them.
--
-- KEYS[1] meta (hash): the queue's settings and bookkeeping (read: does the queue exist)
-- KEYS[2] visible (list): ids of visible messages (the head is received first)
-- KEYS[3] inflight (zset): ids in flight, scored by visibility expiry (ms)
-- KEYS[4] delayed (zset): ids of delayed messages, scored by due time (ms)
-- KEYS[5] messages (hash): id -> record "<sent_ms>|<payload>"
-- KEYS[6] state (hash): id -> "<token>|<receive_count>|<first_ms>|<receive_ms>"
-- KEYS[7] origins (hash): id -> queue a moved message came from
-- KEYS[8] ordered (zset): FIFO queues: "<group> <seq> <id>", each group's messages in order
-- KEYS[9] deferred (zset): fair queues: "<group> <seq> <entry>", noisy groups' messages set
--         aside (visible: listed after the list, each group's in order)
-- KEYS[10] fifo (hash): FIFO queues: id -> "<group> <seq> <sent_ms>" (read: the sequence number)
--
-- ARGV[1] now_ms (ms since epoch, '' = Redis TIME): not read; peek judges
--         nothing by time (a run-out timeout still shows as in flight)
-- ARGV[2] which ('visible', 'in_flight' or 'delayed'): the list or zset to read
-- ARGV[3] limit (1-100): entries to read
-- ARGV[4] offset (0-10000): entries to skip first, by index
--
-- Reads only: no counter, event, receive count or state changes. Reads
-- entries offset to offset + limit - 1 of one list or zset; ids whose
-- message is gone (ghosts, deleted while visible) are left out, so a reply
-- may hold fewer than limit messages.
--
-- On a FIFO queue, visible reads the stored messages group by group, each
-- group's in order, leaving out those in flight; delayed scores are due times
-- by the queue's delay now.
--
-- Returns {OK, [id, score_ms, record, state, origin, seq] * n}: score_ms is the
-- zset score ('' for visible), state, origin and seq '' when absent (seq: FIFO
-- queues only);
-- or {E_QUEUE_MISSING | E_BAD_ARGUMENT, detail}.
local meta = KEYS[1]
local visible = KEYS[2]
local inflight = KEYS[3]
local delayed = KEYS[4]
local messages = KEYS[5]
local state = KEYS[6]
local origins = KEYS[7]
local ordered = KEYS[8]
local deferred = KEYS[9]
local fifo = KEYS[10]
local which = ARGV[2]
local limit = int_arg(ARGV[3], 1, 100)
local offset = int_arg(ARGV[4], 0, 100000000)

if which ~= 'visible' and which ~= 'in_flight' and which ~= 'delayed' then
  return fail(E_BAD_ARGUMENT, 'state must be visible, in_flight or delayed')
end
if limit == nil or offset == nil then
  return fail(E_BAD_ARGUMENT, 'limit must be 1-100 and offset 0-100000000')
end
local settings = redis.call('HMGET', meta, 'fifo', 'delay_ms', 'layout', 'fair')
if redis.call('EXISTS', meta) == 0 then
  return fail(E_QUEUE_MISSING)
end
if newer_layout(settings[3]) then
  return fail(E_LAYOUT, settings[3])
end
local is_fifo = settings[1] == '1'
local delay_ms = tonumber(settings[2]) or 0

local ids = {}
local scores = {}
-- Records and states found in the entries themselves (layout 2), by id.
local inline_records = {}
local member_states = {}
local last = offset + limit - 1
if which == 'visible' and is_fifo then
  local members = redis.call('ZRANGE', ordered, offset, last)
  for i = 1, #members do
    local id = member_id(members[i])
    if redis.call('ZSCORE', inflight, id) == false then
      ids[#ids + 1] = id
      scores[#scores + 1] = ''
    end
  end
elseif which == 'visible' then
  local listed = redis.call('LRANGE', visible, offset, last)
  if #listed < limit and settings[4] == '1' then
    -- Past the list's end: the messages set aside.
    local start = math.max(offset - redis.call('LLEN', visible), 0)
    local aside = redis.call('ZRANGE', deferred, start, start + limit - #listed - 1)
    for i = 1, #aside do
      listed[#listed + 1] = deferred_entry(aside[i])
    end
  end
  for i = 1, #listed do
    local id, record = split_entry(listed[i])
    listed[i] = id
    if record then
      inline_records[id] = record
    end
  end
  -- An id in the list whose message is in flight again (hidden by
  -- change_visibility after its timeout ran out) is a ghost; so is a repeat.
  local held = #listed > 0 and redis.call('ZMSCORE', inflight, unpack(listed)) or {}
  local seen = {}
  for i = 1, #listed do
    if not held[i] and not seen[listed[i]] then
      seen[listed[i]] = true
      ids[#ids + 1] = listed[i]
      scores[#scores + 1] = ''
    end
  end
else
  local zset = inflight
  if which == 'delayed' then
    zset = delayed
  end
  local flat = redis.call('ZRANGE', zset, offset, last, 'WITHSCORES')
  for i = 2, #flat, 2 do
    local id, token, received_ms = split_member(flat[i - 1])
    if token then
      member_states[id] = format_state(token, 1, received_ms, received_ms)
    end
    ids[#ids + 1] = id
    if is_fifo and which == 'delayed' then
      scores[#scores + 1] = tonumber(flat[i]) + delay_ms
    else
      scores[#scores + 1] = flat[i]
    end
  end
end

local reply = {OK}
if #ids == 0 then
  return reply
end
local records = redis.call('HMGET', messages, unpack(ids))
local states = redis.call('HMGET', state, unpack(ids))
local from = redis.call('HMGET', origins, unpack(ids))
local infos = is_fifo and redis.call('HMGET', fifo, unpack(ids)) or {}
for i = 1, #ids do
  local record = records[i] or inline_records[ids[i]]
  if record then
    reply[#reply + 1] = ids[i]
    reply[#reply + 1] = scores[i]
    reply[#reply + 1] = record
    reply[#reply + 1] = states[i] or member_states[ids[i]] or ''
    reply[#reply + 1] = from[i] or ''
    local seq = infos[i] and select(2, parse_fifo(infos[i]))
    reply[#reply + 1] = seq or ''
  end
end
return reply
