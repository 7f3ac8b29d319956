from app import pages

pages.inductor_page()
