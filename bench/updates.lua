-- The load of bench/updates.py: GET the update check URL wrk was given; every other request
-- sends If-None-Match with the ETag of the answer (so about half are answered 304).
-- wrk ... -s bench/updates.lua <check url> -- <etag>

local etag
local counter = 0

function init(args)
   etag = args[1]
end

function request()
   counter = counter + 1
   if counter % 2 == 0 then
      return wrk.format("GET", nil, { ["If-None-Match"] = etag })
   end
   return wrk.format("GET")
end
